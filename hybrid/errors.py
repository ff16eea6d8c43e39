"""One error type for the whole package; the CLI turns it into an exit code (docs/DESIGN.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from nsight.errors import NsightError, ToolFailed

EXIT_OK = 0
EXIT_FINDING_AT_OR_ABOVE = 1  # --fail-on threshold reached
EXIT_USAGE = 2  # bad usage or unreadable input
EXIT_WORKLOAD_FAILED = 3  # the user's script itself failed
EXIT_PROFILER_FAILED = 4  # a profiler failed and nothing could be analyzed
EXIT_GATE_UNDECIDED = 5  # compare --fail-on-regression: the data cannot tell whether B regressed
EXIT_INTERNAL_ERROR = 70  # a defect in hybrid (an unexpected exception): EX_SOFTWARE of sysexits.h
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
# hybrid itself stopped by SIGTERM or SIGHUP: 128 + the signal number, as a shell reports it (143, 129).
EXIT_SIGNAL_BASE = 128


class HybridError(Exception):
    """An error the user can act on: `cause` says what went wrong, `fix` what to do about it."""

    exit_code = EXIT_USAGE

    def __init__(self, cause: str, fix: str = "", *, kept: str | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix
        self.kept = kept  # what was gathered and kept on disk, said to the user

    def message(self) -> str:
        lines = [f"error: {self.cause}"]
        if self.fix:
            lines.append(f"fix: {self.fix}")
        if self.kept:
            lines.append(f"kept: {self.kept}")
        return "\n".join(lines)


class UsageError(HybridError):
    exit_code = EXIT_USAGE


class InputError(HybridError):
    """An artifact (trace, export, CSV, run directory) cannot be read."""

    exit_code = EXIT_USAGE


class OutputError(UsageError):
    """A file hybrid writes cannot be written: no space left, no permission, not a directory."""


class WorkloadError(HybridError):
    exit_code = EXIT_WORKLOAD_FAILED


class ProfilerError(HybridError):
    exit_code = EXIT_PROFILER_FAILED


def from_nsight(error: NsightError) -> HybridError:
    """nsight's error as hybrid's, same cause, fix and kept: a tool that failed is a ProfilerError (exit 4),
    an export or counter table that cannot be read an InputError (exit 2)."""
    kind = ProfilerError if isinstance(error, ToolFailed) else InputError
    return kind(error.cause, error.fix, kept=error.kept)


@contextlib.contextmanager
def nsight_errors_as_hybrid() -> Iterator[None]:
    """Around a call into nsight/: its errors leave as hybrid's (from_nsight), chained to the original."""
    try:
        yield
    except NsightError as error:
        raise from_nsight(error) from error


class Terminated(BaseException):
    """hybrid was sent SIGTERM or SIGHUP (a CI cancel, a scheduler, `timeout`): raised in the main thread
    like KeyboardInterrupt, so a running pass is stopped and what it gathered is kept. Exit 128 + signum."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"hybrid received {self.name}")

    @property
    def exit_code(self) -> int:
        return EXIT_SIGNAL_BASE + self.signum
