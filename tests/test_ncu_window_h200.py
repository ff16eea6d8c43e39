"""The current ncu pass on a real resnet50 b32 run (tests/fixtures/runs/h200-resnet50-50steps): the
measured window reaches the backward kernels, and ncu's per-launch lines are what progress counts."""

from __future__ import annotations

import shutil
from pathlib import Path

from hybrid.pipeline import analyze_run_dir
from nsight import ncu
from nsight.ncu_csv import parse_ncu_csv

RUN = Path(__file__).parent / "fixtures" / "runs" / "h200-resnet50-50steps"


def test_the_measured_window_gives_counters_for_most_of_the_step():
    results = analyze_run_dir(RUN)
    assert results["mode"] == "hybrid"
    # Session 1's NVTX step filter saw only the Python thread's launches: 24% of the GPU time.
    assert results["metrics"]["ncu_coverage_pct"]["value"] > 70.0
    assert results["roofline"]["source"] == "measured:ncu"


def test_progress_counts_one_line_per_replayed_launch():
    console = (RUN / "ncu" / "console.log").read_text().splitlines()
    profiled = [kernel for kernel in map(ncu.profiled_kernel, console) if kernel is not None]
    counters = parse_ncu_csv(RUN / "ncu" / "counters.csv")
    assert len(profiled) == len(counters.frame) == 71
    assert counters.replay_passes == 15
    assert {ncu.function_base_name(n) for n in counters.frame["name"]} == set(profiled)


def test_report_rereads_counters_from_the_saved_ncu_report_when_the_csv_is_missing(tmp_path, monkeypatch):
    # ncu stopped after saving its report but before the CSV was made: `hybrid report` reads the report
    # back with the ncu of this machine. A stand-in ncu answers the import with the H200 table and
    # records its argv, so the test checks the wiring, not Nsight Compute.
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    table = run / "ncu" / "counters.csv"
    captured = tmp_path / "h200-counters.csv"
    table.rename(captured)
    (run / "ncu" / ncu.REPORT_NAME).write_bytes(b"stand-in for an .ncu-rep")
    argv_log = tmp_path / "argv.txt"
    stand_in = tmp_path / "ncu"
    stand_in.write_text(f'#!/bin/sh\necho "$@" > {argv_log}\ncat {captured}\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv(ncu.NCU_ENV, str(stand_in))
    results = analyze_run_dir(run)
    assert results["mode"] == "hybrid" and results["metrics"]["ncu_coverage_pct"]["value"] > 70.0
    assert (
        argv_log.read_text().split() == ncu.build_import_command(stand_in, run / "ncu" / ncu.REPORT_NAME)[1:]
    )
    # The run directory is an input: the counters read back go to a temporary folder, not into run/ncu.
    assert not table.exists()
