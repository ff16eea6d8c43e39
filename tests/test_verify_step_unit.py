"""A fix run is compared with the diagnosis' plain step only when both stepped on the same unit (real H200
files: benchmarks/results/s7_h200/verify_launch_batch1_deep_mlp, session 7 call 1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hybrid.analysis.verified import plain_reference, realized
from hybrid.rundir import RunDir

H200_RUN = Path(__file__).resolve().parents[1] / "benchmarks/results/s7_h200/verify_launch_batch1_deep_mlp"
FIX_PASS = "verify-compile_reduce_overhead"


def _record(run: RunDir) -> dict:
    return next(p for p in run.run_json()["verify"]["fixes"] if p["pass"] == FIX_PASS)


def test_a_fix_run_stepping_on_another_unit_is_not_a_saving():
    # The diagnosis stepped on one batch-1 Sequential.forward (1.32 ms) before the script's first mark_step;
    # the compiled fix run, whose compile delayed the module calls, on mark_step (64 forwards, 87.6 ms).
    run = RunDir.open(H200_RUN)
    reference = plain_reference(run)
    assert reference is not None and reference["step_unit"] == "module_call: one top-level Sequential.forward"
    out = realized(run, _record(run), reference)
    assert out["status"] == "failed" and "realized_ms" not in out
    assert "mark_step" in out["reason"] and "Sequential.forward" in out["reason"]


def test_the_same_unit_compares(tmp_path):
    # The same files with the fix run's step made the diagnosis' own: the saving is the difference.
    copy = tmp_path / "run"
    shutil.copytree(H200_RUN, copy)
    reference_inject = json.loads((copy / "torch" / "inject.json").read_text())
    fix_inject_path = copy / FIX_PASS / "inject.json"
    fix_inject = json.loads(fix_inject_path.read_text())
    fix_inject.update(step_source=reference_inject["step_source"], step_unit=reference_inject["step_unit"])
    fix_inject_path.write_text(json.dumps(fix_inject))
    run = RunDir.open(copy)
    reference = plain_reference(run)
    # Past the unit, the reading meets what this H200 run also recorded: Sequential.compile() compiled no
    # graph (as every Sequential the compile fixes compiled on the device did, benchmarks/results/s27_h100).
    out = realized(run, _record(run), reference)
    assert out["status"] == "not applied" and "compiled no graph" in out["reason"]
    fix_inject["config"]["compile"]["graphs_compiled"] = 1
    fix_inject_path.write_text(json.dumps(fix_inject))
    out = realized(RunDir.open(copy), _record(run), reference)
    assert out["status"] == "realized"
    assert out["realized_ms"] == reference["step_ms"] - fix_inject["step_time_ms"]


def test_the_verify_table_names_a_primary_a_verified_fix_outsaved(tmp_path):
    # HF Trainer GPT-2 on the H200: TF32 realized 7.72 ms a step under --verify, more than the 3.22 ms the
    # unverified primary (cpu.preprocessing, no switch) claims; the goal table must not count that run as won.
    import os
    import subprocess
    import sys

    root = H200_RUN.parents[3]
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "run").symlink_to(root / "benchmarks/results/s7_h200/verify_hf_trainer_gpt2")
    table = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "verify_table.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(root)),
    ).stdout
    assert "- primary is the verified fix that saved most: 0 of 0 runs" in table
    (line,) = [line for line in table.splitlines() if line.startswith("Of those, runs where")]
    assert "hf (`tensor.fp32_gemm` realized 7.72 ms, the primary `cpu.preprocessing` claims 3.22 ms)" in line
