"""Every file hybrid writes goes through here: whole or not at all (a temporary file, then a rename),
never through a link planted where the file goes (the rename replaces the link itself), and with the
permissions the user's umask gives (a colleague reading a shared run directory must be able to).
A run directory received from someone else may hold anything; a full disk must say so."""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

from hybrid.errors import OutputError

# Out of space, out of quota, or over the process's file-size limit (ulimit -f): the same fix.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_no_space(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS


def output_error(path: Path, error: OSError) -> OutputError:
    """The user-facing error for a failed write of `path`."""
    if is_no_space(error):
        return OutputError(f"no space left writing {path} ({error.strerror})",
                           "free space on that disk (or raise the file-size limit, ulimit -f), or pass "
                           "--out on another disk")
    return OutputError(f"cannot write {path}: {error.strerror or error}",
                       "choose a place you can write to (--out DIR), or check its permissions")


def write_file(path: str | os.PathLike, data: str | bytes, *, durable: bool = False) -> Path:
    """Write `data` to `path` atomically. The temporary file is created exclusively (O_EXCL, O_NOFOLLOW)
    with mode 0666 less the umask, as open() gives; `durable` also fsyncs it before the rename.
    Raises OutputError naming the path and the cause (no space, permission, not a directory)."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as error:
        raise output_error(target, error) from error
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise output_error(target, error) from error
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def keep_numbered_copy(path: Path, stem: str, suffix: str) -> Path | None:
    """Keep the current content of `path` as the next free `stem.N.suffix` beside it (1, 2, ...), so
    that rewriting `path` loses nothing; None when `path` is absent. The copy is a hard link where
    the file system allows one (claimed exclusively: two processes never take the same number)."""
    if not path.is_file() or path.is_symlink():
        return None
    for number in range(1, 100_000):
        kept = path.with_name(f"{stem}.{number}{suffix}")
        try:
            os.link(path, kept, follow_symlinks=False)
            return kept
        except FileExistsError:
            continue
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP, errno.EMLINK):
                raise output_error(kept, error) from error
            if kept.exists() or kept.is_symlink():
                continue
            write_file(kept, path.read_bytes())
            return kept
    raise OutputError(f"{path.parent} already keeps 99,999 earlier copies of {path.name}",
                      "move the old results.N.json files away")
