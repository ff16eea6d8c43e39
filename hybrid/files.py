"""Every file hybrid writes goes through here: whole or not at all (a temporary file, then a rename),
never through a link planted where the file goes (the rename replaces the link itself), and with the
permissions the user's umask gives (a colleague reading a shared run directory must be able to).
A run directory received from someone else may hold anything; a full disk must say so.

Nothing hybrid did not make in this run is ever lost: a file already where an output goes is kept as a
numbered copy beside it first (report.html -> report.1.html), unless this process wrote it or it lies
in a run directory this process created; a file this command reads (`hybrid compare A B --html
A/results.json`) or anything that is not a regular file or a link (a folder, a FIFO) is refused."""

from __future__ import annotations

import errno
import os
import secrets
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

from hybrid.errors import InputError, OutputError

# Out of space, out of quota, or over the process's file-size limit (ulimit -f): the same fix.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

# What this process made (real paths): files it may write again, and run directories it claimed,
# whose every file is this run's own (collectors and ranks write there too).
_WRITTEN: set[str] = set()
_CLAIMED: set[str] = set()
# Files this command reads: never a place to write.
_INPUTS: set[str] = set()
# (file, its numbered copy) for each file kept before it was replaced, for the CLI to say.
_KEPT: list[tuple[Path, Path]] = []


def is_no_space(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS


def output_error(path: Path, error: OSError) -> OutputError:
    """The user-facing error for a failed write of `path`."""
    if is_no_space(error):
        return OutputError(
            f"no space left writing {path} ({error.strerror})",
            "free space on that disk (or raise the file-size limit, ulimit -f), or pass "
            "--out on another disk",
        )
    return OutputError(
        f"cannot write {path}: {error.strerror or error}",
        "choose a place you can write to (--out DIR), or check its permissions",
    )


class InputCollision(OutputError):
    """An output path names a file the same command reads: refused before anything is replaced."""


def _real(path: Path) -> str:
    """The real path of `path`'s folder joined with its own name: a link at `path` itself is not followed."""
    return os.path.join(os.path.realpath(path.parent), path.name)


def claimed(folder: Path) -> None:
    """`folder` is a run directory this process created: every file in it is this run's own."""
    _CLAIMED.add(os.path.realpath(folder))


def reads(path: Path) -> None:
    """`path` is an input of this command: write_file refuses to replace it or a link to it."""
    _INPUTS.add(os.path.realpath(path))


def _made_here(real: str) -> bool:
    return real in _WRITTEN or any(real.startswith(folder + os.sep) for folder in _CLAIMED)


def check_output(path: str | os.PathLike) -> None:
    """Raise InputCollision when `path` is a file this command reads, before any work is done."""
    target = Path(os.path.abspath(path))
    if {_real(target), os.path.realpath(target)} & _INPUTS:
        raise InputCollision(
            f"{target} is an input of this command: writing the output there would replace it",
            "name another file for the output",
        )


def _keep_existing(target: Path, real: str) -> None:
    """Before `target` is replaced: keep what is there as a numbered copy, unless this run made it."""
    if _made_here(real):
        return
    try:
        if not target.exists() and not target.is_symlink():
            return
    except OSError as error:
        raise output_error(target, error) from error
    if target.is_symlink() or target.is_file():
        kept = keep_numbered_copy(target)
        if kept is not None:
            _KEPT.append((target, kept))
        return
    raise OutputError(
        f"{target} exists and is not a regular file: hybrid does not replace it",
        "name another file for the output, or move that one away",
    )


def write_file(
    path: str | os.PathLike, data: str | bytes, *, durable: bool = False, cache: bool = False
) -> Path:
    """Write `data` to `path` atomically. The temporary file is created exclusively (O_EXCL, O_NOFOLLOW)
    with mode 0666 less the umask, as open() gives; `durable` also fsyncs it before the rename. A file
    already there that this run did not make is kept as a numbered copy first (see the module), except
    with `cache`: a file hybrid keeps for itself under ~/.cache, replaced as it is updated.
    Raises OutputError naming the path and the cause (no space, permission, not a directory, an input)."""
    target = Path(os.path.abspath(path))
    check_output(target)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise output_error(target, error) from error
    real = _real(target)
    if cache:
        _WRITTEN.add(real)
    _keep_existing(target, real)
    try:
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
            0o666,
        )
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
    _WRITTEN.add(real)
    return target


def kept_copies() -> list[tuple[Path, Path]]:
    """Each file this process kept as a numbered copy before replacing it, with its copy, oldest first."""
    return list(_KEPT)


def numbered_name(path: Path, number: int) -> Path:
    """results.json -> results.1.json; profile.report.html -> profile.report.1.html; README -> README.1."""
    return path.with_name(f"{path.stem}.{number}{path.suffix}" if path.suffix else f"{path.name}.{number}")


def keep_numbered_copy(path: Path) -> Path | None:
    """Keep the current content of `path` (a file, or a link as the link) as the next free numbered name
    beside it (results.1.json, results.2.json, ...), so that rewriting `path` loses nothing; None when
    `path` is absent. The copy is a hard link where the file system allows one (claimed exclusively: two
    processes never take the same number)."""
    if not path.is_symlink() and not path.is_file():
        return None
    for number in range(1, 100_000):
        kept = numbered_name(path, number)
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
            if path.is_symlink():
                os.symlink(os.readlink(path), kept)
            else:
                _copy_exclusive(path, kept)
            return kept
    raise OutputError(
        f"{path.parent} already keeps 99,999 earlier copies of {path.name}",
        f"move the old {numbered_name(path, 1).name.replace('.1', '.N')} files away",
    )


def _copy_exclusive(source: Path, kept: Path) -> None:
    try:
        fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(fd, "wb") as handle:
            handle.write(source.read_bytes())
    except OSError as error:
        raise output_error(kept, error) from error


class NotRegularFile(OSError):
    """A path hybrid reads is a FIFO, a device or a socket."""


def read_regular(path: str | os.PathLike) -> bytes:
    """The bytes of `path`, which must be a regular file (or a link to one). A received run directory may
    hold a FIFO where results.json or run.json belongs: a plain read would wait for a writer forever, so
    the file is opened without blocking and refused (NotRegularFile, an OSError) unless fstat says it is
    a regular file; /dev/zero would never end, and is refused the same way."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file (a FIFO, device or socket)", str(path))
        return handle.read()


def read_regular_text(path: str | os.PathLike) -> str:
    """read_regular as UTF-8 text (UnicodeDecodeError, a ValueError, where it is not)."""
    return read_regular(path).decode("utf-8")


# A gzipped input may expand to at most this many times its size (and never less than the floor): the
# committed torch traces expand 11x to 23x, a 4 MB gzip bomb 2,000x (8.5 GB). Counted before anything is
# kept, so memory stays bounded by the limit whatever the input.
GUNZIP_MAX_RATIO = 100
GUNZIP_FLOOR_BYTES = 64 * 2**20
_GUNZIP_CHUNK = 2**20


def _gunzip_chunks(data: bytes) -> Iterator[bytes]:
    """The decompressed bytes of every gzip member in `data`, a chunk at a time. zlib.error or EOFError
    where the data is damaged or cut off, as gzip.decompress raises."""
    pending = data
    while pending:
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while not member.eof:
            chunk = member.decompress(pending, _GUNZIP_CHUNK)
            pending = member.unconsumed_tail
            if chunk:
                yield chunk
            elif not pending:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
        pending = member.unused_data
        if pending and not pending.startswith(b"\x1f\x8b"):
            if pending.strip(b"\x00"):
                raise zlib.error("trailing data after the last gzip member")
            return


def gunzip_limited(data: bytes, path: Path) -> bytes:
    """gzip.decompress with a bound on the output (see GUNZIP_MAX_RATIO): InputError naming the file when
    it would expand beyond it; zlib.error or EOFError where it is damaged."""
    limit = max(GUNZIP_FLOOR_BYTES, GUNZIP_MAX_RATIO * len(data))
    total = 0
    for chunk in _gunzip_chunks(data):
        total += len(chunk)
        if total > limit:
            raise InputError(
                f"{path} expands to more than {limit / 2**20:,.0f} MB from "
                f"{len(data) / 2**20:,.1f} MB (over {GUNZIP_MAX_RATIO}:1; traces compress about "
                "10-25:1): refused as a decompression bomb",
                "pass the trace as the profiler wrote it",
            )
    return b"".join(_gunzip_chunks(data))
