"""stdout and stderr as the CLI writes to them, whatever is on the other end:
- a reader that went away (`hybrid report DIR | head`) ends the output quietly, as Unix tools do; the
  command still finishes and exits with its own code (a --fail-on decision is not lost);
- a full disk or any other write error on stdout is an OutputError (exit 2) naming the cause, never a
  traceback or Python's "Exception ignored" at exit;
- a terminal whose encoding cannot show a character (PYTHONIOENCODING=ascii, a latin-1 locale) gets an
  ASCII stand-in for the report's own symbols (µs -> us, ± -> +-) and a backslash escape for anything
  else, instead of a UnicodeEncodeError; --json output is then pure ASCII JSON (\\u escapes), which
  parses to the same strings;
- COLUMNS that is not a usable width (COLUMNS=0 made rich print nothing and exit 0) is ignored."""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import json
import os
import re
import sys

from hybrid.errors import OutputError

MIN_COLUMNS = 20  # narrower than this a COLUMNS value is a mistake, not a terminal


def stdout_error(error: OSError) -> OutputError:
    return OutputError(
        f"cannot write the output to stdout: {error.strerror or error}",
        "send stdout where there is room (a disk with free space, or a pipe); a run "
        "directory keeps the report as report.txt and results.json either way",
    )


_NON_ASCII = re.compile("[^\x00-\x7f]")


class GuardedStdout(io.TextIOBase):
    """Wraps the real stdout: see the module."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.reader_gone = False

    def _discard(self) -> None:
        """Point stdout's descriptor at /dev/null, so that the interpreter's last flush cannot fail again."""
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass

    def _guarded(self, call, *args):
        if self.reader_gone:
            return None
        try:
            return call(*args)
        except BrokenPipeError:
            self.reader_gone = True
            self._discard()
            return None
        except OSError as error:
            self._discard()
            raise stdout_error(error) from error

    def write(self, text: str) -> int:
        self._guarded(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return self._stream.encoding

    @property
    def errors(self) -> str | None:
        return self._stream.errors


# What the report's own symbols read as where the terminal cannot show them; anything else is escaped.
ASCII_FALLBACK = {
    "µ": "u",
    "±": "+-",
    "·": "|",
    "→": "->",
    "—": "-",
    "–": "-",
    "…": "...",
    "×": "x",
    "≥": ">=",
    "≤": "<=",
}
ERROR_HANDLER = "hybrid-ascii"


def _fallback(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    shown = "".join(
        ASCII_FALLBACK.get(char) or char.encode("unicode_escape").decode("ascii") for char in text
    )
    return shown, error.end


codecs.register_error(ERROR_HANDLER, _fallback)


def _escape_unencodable(stream) -> None:
    if hasattr(stream, "reconfigure"):
        with contextlib.suppress(ValueError, io.UnsupportedOperation):
            stream.reconfigure(errors=ERROR_HANDLER)


def guard_streams() -> None:
    """Install the guards described in the module, once per process."""
    columns = os.environ.get("COLUMNS")
    if columns is not None and not (columns.isdigit() and int(columns) >= MIN_COLUMNS):
        del os.environ["COLUMNS"]
    for stream in (sys.stdout, sys.stderr):
        _escape_unencodable(stream)
    if sys.stdout is not None and not isinstance(sys.stdout, GuardedStdout):
        sys.stdout = GuardedStdout(sys.stdout)


def finish_stdout() -> None:
    """Flush stdout before exit; raises OutputError where that fails (a full disk)."""
    try:
        sys.stdout.flush()
    except OSError as error:
        if error.errno != errno.EPIPE:
            raise stdout_error(error) from error


def unicode_stdout() -> bool:
    """stdout can encode any character (UTF-8, UTF-16, UTF-32)."""
    try:
        name = codecs.lookup(getattr(sys.stdout, "encoding", None) or "ascii").name
    except LookupError:
        return False
    return name.startswith("utf")


def json_text(text: str) -> str:
    """JSON text as stdout can carry it: unchanged on a Unicode stream, else with every non-ASCII
    character as its \\u escape (JSON allows non-ASCII only inside strings, where the escape means the
    same character)."""
    if unicode_stdout():
        return text
    return _NON_ASCII.sub(lambda match: json.dumps(match.group(0))[1:-1], text)
