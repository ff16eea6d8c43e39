"""The Nsight Systems CLI as hybrid calls it: nsight.nsys, whose failures leave as hybrid's ProfilerError
(exit 4 with the same cause and fix, docs/DESIGN.md). Torch-free and pandas-free, as nsight.nsys is."""

from __future__ import annotations

from pathlib import Path

from hybrid.errors import nsight_errors_as_hybrid
from nsight import nsys as _nsys
from nsight.nsys import (
    CALLSITE_LEVELS,
    NSYS_ENV,
    CallsiteSampling,
    build_nsys_command,
    callsite_sampling,
    export_sqlite,
    find_nsys,
    profile_help,
)

__all__ = [
    "CALLSITE_LEVELS",
    "NSYS_ENV",
    "CallsiteSampling",
    "build_nsys_command",
    "callsite_sampling",
    "check_export",
    "check_nsys_version",
    "export_sqlite",
    "find_nsys",
    "nsys_version",
    "profile_help",
]


def nsys_version(nsys: Path) -> str:
    """nsight.nsys.nsys_version; ProfilerError when the binary does not run or answers no version."""
    with nsight_errors_as_hybrid():
        return _nsys.nsys_version(nsys)


def check_nsys_version(version: str) -> None:
    """ProfilerError when `version` predates what hybrid's flags need (nsight.nsys.MIN_NSYS_VERSION)."""
    with nsight_errors_as_hybrid():
        _nsys.check_nsys_version(version)


def check_export(out_base: Path, returncode: int, log: str, log_path: Path | None = None) -> Path:
    """The .sqlite the pass wrote; ProfilerError quoting nsys's output when there is none."""
    with nsight_errors_as_hybrid():
        return _nsys.check_export(out_base, returncode, log, log_path)
