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


def test_the_measured_tf32_speedup_replays_the_saving_its_fixed_twin_realized(tmp_path):
    # tc_fp32_no_tf32's run/calibration.json: its two FP32 matmul shapes timed on the same H200 with and
    # without TF32 (5,410 -> 924 µs, 5,845 -> 755 µs). Its fixed twin (TF32 on) ran 11.54 ms a step plain,
    # the script itself 60.27 ms: 48.7 ms realized.
    planted = PLANTED / "tc_fp32_no_tf32"
    run = tmp_path / "run"
    shutil.copytree(planted / "run", run, ignore=shutil.ignore_patterns(CALIBRATION_FILE))
    before = analyze_run_dir(run)
    fp32 = next(f for f in before["diagnosis"]["bottlenecks"] if f["id"] == "tensor.fp32_gemm")
    assert fp32["time_lost_method"] == "model" and "no calibration pass" in fp32["replay_reason"]
    after = analyze_run_dir(planted / "run")
    fp32 = next(f for f in after["diagnosis"]["bottlenecks"] if f["id"] == "tensor.fp32_gemm")
    assert fp32["time_lost_method"] == "replay" and "replay_reason" not in fp32
    assert "NVIDIA H200" in fp32["replay"]["basis"] and "5,410 -> 924 µs" in fp32["replay"]["basis"]
    plain = {
        name: json.loads((planted / name / "inject.json").read_text())["step_time_ms"]
        for name in ("plain_script", "plain_twin")
    }
    realized = plain["plain_script"] - plain["plain_twin"]
    assert fp32["time_lost_ms"] == pytest.approx(realized, rel=0.05)
