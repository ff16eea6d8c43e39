"""An nsys export whose trace session (ANALYSIS_DETAILS) is written on another clock than its records, as
nsys 2025.3 does under --capture-range=cudaProfilerApi (H200, resnet50 b32, 2026-12-02: session 11.75 to
12.44 s, every record 0.015 to 0.69 s): the records are the measurement, not corrupt. The committed exports
were trimmed without ANALYSIS_DETAILS, so this adds the table to a copy of one, with the figures seen."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from hybrid.load.nsys_export import load_nsys_export

EXPORT = Path(__file__).resolve().parent / "fixtures" / "runs" / "h200-simple_cnn" / "nsys" / "profile.sqlite"


def _with_session(tmp_path: Path, start_ns: int, stop_ns: int) -> Path:
    export = tmp_path / "profile.sqlite"
    shutil.copy(EXPORT, export)
    with sqlite3.connect(export) as con:
        con.execute(
            "CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, startTime INTEGER, "
            "stopTime INTEGER)"
        )
        con.execute(
            "INSERT INTO ANALYSIS_DETAILS VALUES (0, ?, ?, ?)", (stop_ns - start_ns, start_ns, stop_ns)
        )
    return export


def test_a_session_on_another_clock_does_not_drop_the_records(tmp_path):
    kernels = len(load_nsys_export(EXPORT).kernels)
    assert kernels > 0
    profile = load_nsys_export(_with_session(tmp_path, 11_752_268_519, 12_436_604_130))
    assert len(profile.kernels) == kernels
    assert not any("impossible times" in warning for warning in profile.warnings)


def test_a_session_on_the_records_clock_still_bounds_them(tmp_path):
    # The same export with a session that ends before its last records: those records are dropped and named.
    calls = load_nsys_export(EXPORT)
    starts = calls.kernels["start_ns"].sort_values()
    stop = int(starts.iloc[len(starts) // 2])
    profile = load_nsys_export(_with_session(tmp_path, int(starts.iloc[0]) - 1, stop))
    assert 0 < len(profile.kernels) < len(calls.kernels)
    assert any("kernels with impossible times" in warning for warning in profile.warnings)
