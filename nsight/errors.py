"""nsight's own errors. nsight/ knows the Nsight tools and their files, not hybrid's exit codes: a caller
maps these to its own (hybrid.errors.from_nsight: an unreadable input exits 2, a failed tool 4, as
docs/DESIGN.md documents)."""

from __future__ import annotations


class NsightError(Exception):
    """What went wrong (`cause`), what to do about it (`fix`), and what was kept on disk (`kept`)."""

    def __init__(self, cause: str, fix: str = "", *, kept: str | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix
        self.kept = kept


class UnreadableInput(NsightError):
    """An export or counter table cannot be read: missing, empty, damaged, or not what it claims to be."""


class ToolFailed(NsightError):
    """nsys or ncu did not run, or ran and left no usable output."""
