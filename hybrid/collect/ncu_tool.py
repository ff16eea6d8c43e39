"""The Nsight Compute CLI as hybrid calls it: nsight.ncu, whose failures leave as hybrid's ProfilerError
(exit 4 with the same cause and fix, docs/DESIGN.md) and whose files (counters.csv, ncu.log) are written
by hybrid.files.write_file: atomic, and a file hybrid did not make is kept as a numbered copy, never
overwritten. Torch-free and pandas-free, as nsight.ncu is."""

from __future__ import annotations

from pathlib import Path

from hybrid.errors import ProfilerError, nsight_errors_as_hybrid
from hybrid.files import write_file
from nsight import ncu as _ncu
from nsight.ncu import (
    NCU_ENV,
    PERMISSION_FIX,
    REPORT_NAME,
    build_ncu_command,
    find_ncu,
    ncu_version,
    profiled_kernel,
)

__all__ = [
    "NCU_ENV",
    "PERMISSION_FIX",
    "REPORT_NAME",
    "build_ncu_command",
    "check_counter_permission",
    "export_counters",
    "find_ncu",
    "finish_pass",
    "ncu_version",
    "profiled_kernel",
]


def check_counter_permission(output: str) -> ProfilerError | None:
    """A ProfilerError naming the fixes when ncu's output says counters are not accessible."""
    denied = _ncu.check_counter_permission(output)
    return None if denied is None else ProfilerError(denied.cause, denied.fix, kept=denied.kept)


def export_counters(ncu: Path, report_path: Path, csv_path: Path) -> str:
    """The saved report's counters into `csv_path` (nsight.ncu.export_counters); OutputError when the
    CSV cannot be written."""
    return _ncu.export_counters(ncu, report_path, csv_path, write=write_file)


def finish_pass(
    ncu: Path, report_path: Path, csv_path: Path, log_path: Path, returncode: int, console: str
) -> bool:
    """After the profiling run: the report as CSV, then nsight.ncu.check_run, whose ToolFailed leaves as
    ProfilerError. Returns whether the table is partial (ncu stopped after profiling some kernels)."""
    import_error = export_counters(ncu, report_path, csv_path)
    if import_error:
        console = f"{console}\n==ERROR== {import_error}\n"
    with nsight_errors_as_hybrid():
        return _ncu.check_run(csv_path, log_path, returncode, console, write=write_file)
