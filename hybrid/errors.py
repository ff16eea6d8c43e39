"""One error type for the whole package; the CLI turns it into an exit code (DESIGN.md)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDING_AT_OR_ABOVE = 1  # --fail-on threshold reached
EXIT_USAGE = 2  # bad usage or unreadable input
EXIT_WORKLOAD_FAILED = 3  # the user's script itself failed
EXIT_PROFILER_FAILED = 4  # a profiler failed and nothing could be analyzed


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


class WorkloadError(HybridError):
    exit_code = EXIT_WORKLOAD_FAILED


class ProfilerError(HybridError):
    exit_code = EXIT_PROFILER_FAILED
