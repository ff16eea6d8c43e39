"""nsight/ raises its own errors; where hybrid calls it they leave as hybrid's, with the cause, fix and
exit code docs/DESIGN.md documents (2: unreadable input, 4: a profiler failed). Shown through the real
CLI on a renamed text file, a header-only ncu CSV and an nsys binary too old for hybrid's flags."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.errors import EXIT_PROFILER_FAILED, EXIT_USAGE, InputError, ProfilerError, from_nsight
from hybrid.load.ncu_match import read_counters
from nsight.errors import ToolFailed, UnreadableInput
from nsight.ncu_csv import read_ncu_csv

ROOT = Path(__file__).resolve().parents[1]
SIMPLE_CNN = ROOT / "tests" / "fixtures" / "runs" / "h200-simple_cnn"


def hybrid(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hybrid", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", **(env or {})},
    )


def test_each_nsight_error_becomes_the_hybrid_error_of_its_kind():
    failed = from_nsight(ToolFailed("nsys died", "reinstall it", kept="/run/nsys"))
    unreadable = from_nsight(UnreadableInput("x.sqlite is damaged", "export it again"))
    assert type(failed) is ProfilerError and failed.exit_code == EXIT_PROFILER_FAILED == 4
    assert type(unreadable) is InputError and unreadable.exit_code == EXIT_USAGE == 2
    assert failed.message() == "error: nsys died\nfix: reinstall it\nkept: /run/nsys"
    assert unreadable.message() == "error: x.sqlite is damaged\nfix: export it again"


def test_the_loading_stage_reads_counters_as_hybrid_errors(tmp_path):
    header_only = tmp_path / "counters.csv"
    header_only.write_text('"ID","Process ID","Kernel Name"\n')
    with pytest.raises(UnreadableInput) as raw:
        read_ncu_csv(header_only)
    with pytest.raises(InputError) as loaded:
        read_counters(header_only)
    assert loaded.value.cause == raw.value.cause and loaded.value.fix == raw.value.fix
    assert isinstance(loaded.value.__cause__, UnreadableInput)


def test_a_text_file_named_sqlite_exits_2_with_nsights_cause_and_fix(tmp_path):
    notes = tmp_path / "notes.sqlite"
    notes.write_text("kernel timings, see the spreadsheet\n")
    done = hybrid("report", str(notes))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: {notes} is not an SQLite database",
        (
            "fix: export the report with `nsys export --type sqlite REPORT.nsys-rep`, or pass the .sqlite "
            "file that `nsys profile --export sqlite` wrote"
        ),
    ]


def test_a_header_only_ncu_csv_given_with_ncu_exits_2(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SIMPLE_CNN, run)
    header_only = tmp_path / "bad.csv"
    header_only.write_text('"ID","Process ID","Kernel Name"\n')
    done = hybrid("report", str(run), "--ncu", str(header_only))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-2:] == [
        f"error: {header_only}: ncu CSV header lacks columns ['Block Size', 'Grid Size']",
        "fix: write the CSV with a recent ncu (2023.1 or newer) and --csv",
    ]


def test_an_nsys_too_old_for_the_flags_exits_4_before_the_script_runs(tmp_path):
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "NVIDIA Nsight Systems version 2022.4.2.1-abc"\n')
    fake.chmod(0o755)
    marker = tmp_path / "ran.txt"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    out = tmp_path / "run"
    done = hybrid("run", "--mode", "nsys", "--out", str(out), str(script), env={"HYBRID_NSYS": str(fake)})
    assert done.returncode == 4, done.stderr
    assert done.stderr.splitlines() == [
        (
            "error: nsys 2022.4.2.1 is too old: hybrid needs 2023.1 or newer (for --cuda-graph-trace and "
            "--capture-range-end), and --mode nsys needs it"
        ),
        "fix: install a newer Nsight Systems and put it on PATH or in HYBRID_NSYS",
        f"kept: {out}",
    ]
    assert not marker.exists()
