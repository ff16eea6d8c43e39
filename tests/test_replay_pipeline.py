"""The replay inside the analysis (hybrid.pipeline): results.json fields, the fallback without an
nsys timeline, and a run directory's calibration.json, on real H200 run directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hybrid.pipeline import analyze_run_dir
from hybrid.replay.calibrate import CALIBRATION_FILE
from hybrid.report.terminal import render_terminal
from hybrid.schema import missing_keys

PLANTED = Path(__file__).parent / "fixtures" / "planted"


@pytest.fixture(scope="module")
def sync_results() -> dict:
    return analyze_run_dir(PLANTED / "sync_item_per_microstep" / "run")


def test_results_carry_the_replay(sync_results):
    timing = sync_results["timing"]
    assert timing["replay_step_time_ms"] == pytest.approx(timing["step_time_ms"], rel=0.03)
    findings = sync_results["diagnosis"]["bottlenecks"]
    assert {f["time_lost_method"] for f in findings} <= {"replay", "model"}
    sync = next(f for f in findings if f["id"] == "sync.per_step")
    assert sync["time_lost_method"] == "replay" and sync["replay"]["fix"] == "no_syncs"
    assert sync["time_lost_ms"] == pytest.approx(
        timing["replay_step_time_ms"] - sync["replay"]["step_time_ms"]
    )
    assert "time_lost_model_ms" in sync and any(e["label"] == "replayed fix" for e in sync["evidence"])
    together = sync_results["diagnosis"]["replay_all_fixes"]
    assert "sync.per_step" in together["findings"]
    assert (
        together["saved_ms"]
        >= max(f["time_lost_ms"] for f in findings if f["time_lost_method"] == "replay") - 1e-6
    )
    assert not missing_keys(sync_results)


def test_primary_is_the_largest_saving_and_the_ranking_follows(sync_results):
    findings = [f for f in sync_results["diagnosis"]["bottlenecks"] if not f["not_measured"]]
    assert [f["time_lost_ms"] for f in findings] == sorted(
        (f["time_lost_ms"] for f in findings), reverse=True
    )
    assert sync_results["diagnosis"]["primary_bottleneck"]["id"] == findings[0]["id"]
    assert render_terminal(sync_results, verbose=True, color=False)  # the renderers take the new fields


def test_without_an_nsys_timeline_every_finding_keeps_its_closed_form(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(
        PLANTED / "data_loader_workers0" / "run", run, ignore=shutil.ignore_patterns("nsys", "ncu")
    )
    results = analyze_run_dir(run)
    assert results["timing"]["replay_step_time_ms"] is None
    assert {f["time_lost_method"] for f in results["diagnosis"]["bottlenecks"]} == {"model"}
    assert any("No replay of the step" in text and "nsys" in text for text in results["limitations"])


def test_a_calibration_file_in_the_run_replays_the_tf32_finding(tmp_path):
    # A calibration file as `python -m hybrid.replay.calibrate` writes it, for the run's own top shapes
    # (the timings here are test inputs: this box has no GPU to measure them on).
    run = tmp_path / "run"
    shutil.copytree(PLANTED / "tc_fp32_no_tf32" / "run", run)
    before = analyze_run_dir(run)
    fp32 = next(f for f in before["diagnosis"]["bottlenecks"] if f["id"] == "tensor.fp32_gemm")
    assert fp32["time_lost_method"] == "model" and "calibrate" in fp32["replay_reason"]
    calibration = {
        "device": "NVIDIA H200 | torch 2.11.0",
        "pinned_copy_bytes_per_s": 5.0e10,
        "shapes": [
            {
                "key": "mm:8192x4096x4096:fp32",
                "op": "mm",
                "dims": [8192, 4096, 4096],
                "dtype": "fp32",
                "share": 0.64,
                "us": {"current": 5400.0, "tf32": 1800.0, "bf16": 900.0},
            },
            {
                "key": "mm:4096x4096x8192:fp32",
                "op": "mm",
                "dims": [4096, 4096, 8192],
                "dtype": "fp32",
                "share": 0.36,
                "us": {"current": 5400.0, "tf32": 1800.0, "bf16": 900.0},
            },
        ],
    }
    (run / CALIBRATION_FILE).write_text(json.dumps(calibration))
    after = analyze_run_dir(run)
    fp32 = next(f for f in after["diagnosis"]["bottlenecks"] if f["id"] == "tensor.fp32_gemm")
    assert fp32["time_lost_method"] == "replay"
    assert "5,400 -> 1,800 µs" in fp32["replay"]["basis"] and " 3x " in fp32["replay"]["basis"]
    # The loop queues a whole step of GEMMs ahead of the device: two thirds of their time comes off the step.
    gemm_ms = next(e["value"] for e in fp32["evidence"] if e["label"] == "FP32 GEMM time per step")
    assert fp32["time_lost_ms"] == pytest.approx(gemm_ms * 2 / 3, rel=0.05)
