"""benchmarks/ncu_accuracy.py keeps going when a case's ncu run fails, and says which and why.

The accuracy checks themselves need a GPU and ncu; here the script runs for real with a stand-in
"ncu" that profiles nothing (`true`), so every case must come out failed, none may stop the others."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "ncu_accuracy.py"


def test_every_case_is_reported_when_ncu_profiles_nothing(tmp_path):
    out = tmp_path / "accuracy.md"
    env = {**os.environ, "HYBRID_NCU": shutil.which("true") or "/bin/true"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--work", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    rows = [
        line for line in out.read_text().splitlines() if line.startswith("| ") and "ncu run failed" in line
    ]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == [
        "copy",
        "gemm_bf16",
        "gemm_fp32",
        "elementwise",
    ]
    assert all("wrote no counter table" in row and row.endswith("| FAIL |") for row in rows)
    assert "Traceback" not in proc.stderr


def test_the_h200_counters_pass_every_accuracy_check(tmp_path):
    """The CSVs of the H200 run (benchmarks/results/ncu_accuracy_h200), read by nsight.ncu_csv and
    judged by the script's checks: DRAM bytes of a copy, GEMM FLOPs, tensor pipe, roofline class."""
    out = tmp_path / "accuracy.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(out),
            "--rescore",
            str(ROOT / "benchmarks" / "results" / "ncu_accuracy_h200"),
            "--gpu",
            "NVIDIA H200",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [
        line
        for line in out.read_text().splitlines()
        if line.startswith("| ") and not line.startswith("| case")
    ]
    assert len(rows) == 7 and all(row.endswith("| pass |") for row in rows)
    assert "compute-bound | 808.5 | FLOP/B: compute-bound" in out.read_text()
