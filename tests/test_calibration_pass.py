"""The calibration pass of `hybrid run` (hybrid.collect.calibration_pass): a real child process times a
real H200 run's GEMM shape (on CPU tensors here, --device cpu), a child that fails leaves a failed row and
the run goes on, a skipped pass says why, and that reason reaches the findings it would have replayed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from hybrid.collect import calibration_pass
from hybrid.collect.orchestrate import Orchestrator, RunOptions, Target
from hybrid.pipeline import analyze_run_dir
from hybrid.replay.calibrate import CALIBRATION_FILE
from hybrid.report.terminal import render_terminal
from hybrid.report.units import format_value
from hybrid.rules.registry import RULE_BY_ID
from hybrid.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "tests" / "fixtures" / "planted"
SCRIPTS = ROOT / "tests" / "scripts"


def _run_copy(tmp_path: Path, name: str) -> RunDir:
    """A planted H200 run directory without its calibration: as `hybrid run` leaves it before the pass."""
    run = tmp_path / name
    shutil.copytree(PLANTED / name / "run", run, ignore=shutil.ignore_patterns(CALIBRATION_FILE))
    return RunDir.open(run)


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HYBRID_CACHE_DIR": str(tmp_path / "cache")}


def _fp32_finding(run: RunDir) -> dict:
    results = analyze_run_dir(run.path)
    return next(f for f in results["diagnosis"]["bottlenecks"] if f["id"] == "tensor.fp32_gemm")


@pytest.mark.slow
def test_the_pass_times_the_runs_own_shapes_in_a_child_process(tmp_path):
    # launch_batch1_deep_mlp's step is a stack of 1x256x256 FP32 matmuls: small enough for CPU tensors.
    run = _run_copy(tmp_path, "launch_batch1_deep_mlp")
    events: list[tuple[str, str]] = []
    row = calibration_pass.pass_row(
        run,
        enabled=True,
        cuda_used=True,
        env=_env(tmp_path),
        progress=lambda name, event, _detail: events.append((name, event)),
        device="cpu",
        budget_s=3.0,
    )
    assert row is not None and row["status"] == "ok" and row["returncode"] == 0, row
    assert row["wall_s"] > 0 and row["command"][-4:] == ["--device", "cpu", "--budget-s", "3"]
    assert "1 GEMM/conv shape(s) of this run timed (fp32->tf32" in row["contributed"]
    written = json.loads((run.path / CALIBRATION_FILE).read_text())
    assert [r["key"] for r in written["shapes"]] == ["mm:1x256x256+nt:fp32"]  # nn.Linear: x @ W.t()
    assert set(written["shapes"][0]["us"]) == {"current", "tf32", "bf16"} and written["budget_s"] == 3.0
    assert events == [("calibration", "start"), ("calibration", "end")]
    assert (run.path / "calibration" / "command.txt").read_text().split()[2] == "hybrid.collect.calibrate_run"
    # The cost line lists the pass with its wall time and the speedups it measured.
    assert row["message"].startswith("fp32->tf32 ") and ", fp32->bf16 " in row["message"]
    run.update_run_json(passes=[*run.run_json()["passes"], row])
    results = analyze_run_dir(run.path)
    passes = " ".join(render_terminal(results, color=False).split())
    assert f"calibration ({format_value(row['wall_s'], 's')}, {row['message']})" in passes


@pytest.mark.slow
def test_a_failed_child_leaves_a_failed_row_whose_reason_reaches_the_finding(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    run = _run_copy(tmp_path, "tc_fp32_no_tf32")
    row = calibration_pass.pass_row(
        run, enabled=True, cuda_used=True, env=_env(tmp_path), progress=lambda *_: None
    )
    assert row is not None and row["status"] == "failed" and row["returncode"] == 2
    assert "error: CUDA is not available here" in row["message"]
    assert row["contributed"].startswith("nothing: exit status 2")
    assert not (run.path / CALIBRATION_FILE).exists()
    run.update_run_json(passes=[*run.run_json()["passes"], row])
    fp32 = _fp32_finding(run)
    assert fp32["time_lost_method"] == "model"
    assert (
        "the calibration pass failed: exit status 2: error: CUDA is not available here"
        in fp32["replay_reason"]
    )


@pytest.mark.parametrize(
    ("enabled", "cuda_used", "reason"),
    [(False, True, calibration_pass.DISABLED), (True, False, calibration_pass.NO_CUDA)],
)
def test_a_skipped_pass_says_why_in_run_json_and_in_the_finding(tmp_path, enabled, cuda_used, reason):
    run = _run_copy(tmp_path, "tc_fp32_no_tf32")
    row = calibration_pass.pass_row(
        run, enabled=enabled, cuda_used=cuda_used, env={}, progress=lambda *_: None
    )
    assert row is None and run.run_json()["calibration"] == {"skipped": reason}
    fp32 = _fp32_finding(run)
    assert fp32["time_lost_method"] == "model"
    assert fp32["replay_reason"].startswith("the datasheet's FP32/TF32 peak ratio; no TF32 speedup measured")
    assert fp32["replay_reason"].endswith(reason)


def test_a_run_without_a_torch_trace_is_not_calibrated(tmp_path):
    run = _run_copy(tmp_path, "tc_fp32_no_tf32")
    shutil.rmtree(run.path / "torch")
    assert (
        calibration_pass.pass_row(run, enabled=True, cuda_used=True, env={}, progress=lambda *_: None) is None
    )
    assert run.run_json()["calibration"] == {"skipped": calibration_pass.NO_TRACE}


def test_a_run_whose_findings_replay_no_calibrated_speedup_is_not_calibrated(tmp_path):
    """The analysis the ncu plan made decides: resnet50 b64 on the H200 (fusion, roofline and small-grid
    findings) timed 8 shapes in 8.6 s for fixes that read none of them. The planted FP32 run's analysis
    holds tensor.fp32_gemm, whose rule replays the TF32 speedup: that run is calibrated."""
    run = _run_copy(tmp_path, "graph_breaks")
    analysis = analyze_run_dir(run.path)
    diagnosis = analysis["diagnosis"]
    ids = [f["id"] for f in diagnosis["bottlenecks"] + diagnosis["below_floor"]]
    assert ids and not any(i.startswith("tensor.") and not i.endswith("not_measured") for i in ids)
    row = calibration_pass.pass_row(
        run, enabled=True, cuda_used=True, env={}, progress=lambda *_: None, finding_ids=ids
    )
    assert row is None and run.run_json()["calibration"] == {"skipped": calibration_pass.NOT_NEEDED}
    fp32_run = _run_copy(tmp_path, "tc_fp32_no_tf32")
    fp32_ids = [f["id"] for f in analyze_run_dir(fp32_run.path)["diagnosis"]["bottlenecks"]]
    assert "tensor.fp32_gemm" in fp32_ids
    assert any(RULE_BY_ID[i].calibrated for i in fp32_ids)


@pytest.mark.slow
def test_a_cpu_run_records_why_it_was_not_calibrated(tmp_path):
    out = tmp_path / "run"
    Orchestrator(
        Target([str(SCRIPTS / "steady_steps.py"), "60"]),
        RunOptions(out_dir=out, mode="torch", warmup=2, steps=4, calibrate=True),
    ).run()
    run = json.loads((out / "run.json").read_text())
    assert run["calibration"] == {"skipped": calibration_pass.NO_CUDA}
    assert "calibration" not in [p["name"] for p in run["passes"]]
