"""Comparing two runs on real H200 documents: noise-aware step time, percentage points, findings that are
resolved only where the other run measured what they rest on, different workloads called out, and the
CI gate that cannot pass by accident."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from hybrid.pipeline import analyze_run_dir
from hybrid.report.compare import compare_results, gate, render_compare
from hybrid.report.html_report import render_compare_html

ROOT = Path(__file__).resolve().parents[1]
RESULT_FILES = sorted((ROOT / "tests" / "fixtures" / "results").glob("*.json"))
RUNS = ROOT / "tests" / "fixtures" / "runs"
OLD_ANALYSIS = ROOT / "tests" / "fixtures" / "compare" / "h200_resnet50_session2_analysis.json"


@pytest.fixture(params=RESULT_FILES, ids=lambda p: p.stem)
def results(request) -> dict:
    return json.loads(request.param.read_text())


@pytest.fixture(scope="module")
def resnet_runs() -> tuple[dict, dict]:
    """The same resnet50 workload captured twice on the H200: 5 steps with the torch pass, 50 steps whose
    torch pass kept no operators (its limitation says so)."""
    return analyze_run_dir(RUNS / "h200-resnet50"), analyze_run_dir(RUNS / "h200-resnet50-50steps")


def test_a_run_against_itself_changes_nothing(results):
    diff = compare_results(results, results)
    assert diff["step_time_ms"]["delta"] == 0 and diff["step_time_ms"]["verdict"] in ("unchanged", "unknown")
    assert diff["findings"]["resolved"] == [] and diff["findings"]["new"] == []
    measured = [f for f in results["diagnosis"]["bottlenecks"] if not f.get("not_measured")]
    assert len(diff["findings"]["unchanged"]) == len(measured)
    if results["timing"]["step_time_ms"] is not None:
        assert gate(diff, 0.0) is None


def test_two_captures_of_one_workload_read_unchanged_and_nothing_is_called_resolved(resnet_runs):
    five, fifty = resnet_runs
    diff = compare_results(five, fifty)
    step = diff["step_time_ms"]
    # 42.6 ± 0.35 ms against 42.8 ± 0.84 ms: a 0.4% difference inside the steps' spread.
    assert abs(step["delta"]) < step["noise_ms"] and step["verdict"] == "unchanged"
    assert gate(diff, 0.0) is None and diff["workload"]["differences"] == []
    # Both captures give the same findings: nothing resolved, nothing new.
    assert diff["findings"]["resolved"] == [] and diff["findings"]["new"] == []
    text = render_compare(diff)
    assert "unchanged: within the steps' spread" in text
    assert "Resolved: " not in text.replace("Not checked", "")
    util = diff["gpu_util_pct"]
    assert util["delta_pp"] == pytest.approx(util["b"] - util["a"]) and " pp)" in text


def test_a_finding_resting_on_data_the_other_run_lacks_is_not_checked_rather_than_resolved(resnet_runs):
    # Session 2's analysis of a 15-step resnet50 capture (the README's example then) has cpu.heavy_ops, which
    # rests on torch operator timings; the 50-step run kept no operators, so it cannot say the finding is gone.
    example = json.loads(OLD_ANALYSIS.read_text())
    assert "cpu.heavy_ops" in {f["id"] for f in example["diagnosis"]["bottlenecks"]}
    diff = compare_results(example, resnet_runs[1])
    assert "cpu.heavy_ops" in {f["id"] for f in diff["findings"]["not_checked_in_b"]}
    assert "cpu.heavy_ops" not in {f["id"] for f in diff["findings"]["resolved"]}
    missing = next(f for f in diff["findings"]["not_checked_in_b"] if f["id"] == "cpu.heavy_ops")["missing"]
    assert "cpu_heavy_ops" in missing
    assert "Not checked in B" in render_compare(diff)


def test_a_slower_candidate_beyond_the_spread_fails_the_gate(resnet_runs):
    base = resnet_runs[0]
    slower = copy.deepcopy(base)
    slower["timing"]["step_time_ms"] *= 1.2
    fixed = slower["diagnosis"]["bottlenecks"].pop(0)
    diff = compare_results(base, slower)
    assert diff["step_time_ms"]["delta_pct"] == pytest.approx(20.0) and diff["step_time_ms"]["verdict"] == "slower"
    assert gate(diff, 10.0) is not None and gate(diff, 25.0) is None
    assert "above the 10% threshold" in gate(diff, 10.0)
    assert [f["id"] for f in diff["findings"]["resolved"]] == [fixed["id"]]
    assert f"Resolved: [{fixed['severity']}] {fixed['title']}" in render_compare(diff)


def test_a_change_within_the_spread_is_unchanged_even_above_the_threshold():
    # The planted cpu_numpy_augment run varies 20.8% from step to step (CV).
    noisy = json.loads((ROOT / "tests" / "fixtures" / "results" / "h200_planted_cpu_numpy_augment.json").read_text())
    after = copy.deepcopy(noisy)
    after["timing"]["step_time_ms"] *= 1.05
    diff = compare_results(noisy, after)
    assert diff["step_time_ms"]["verdict"] == "unchanged" and gate(diff, 1.0) is None


def test_different_models_are_called_out_and_fail_the_gate(resnet_runs):
    cnn = analyze_run_dir(RUNS / "h200-simple_cnn")
    diff = compare_results(resnet_runs[0], cnn)
    assert any("models differ (resnet50 vs simple_cnn)" in d for d in diff["workload"]["differences"])
    text = render_compare(diff)
    assert text.startswith("WARNING: models differ")
    assert "different workloads" in gate(diff, 50.0)


def test_a_candidate_without_a_step_time_fails_the_gate(resnet_runs):
    diff = compare_results(resnet_runs[0], {})
    assert "candidate has no step time" in gate(diff, 10.0)
    with pytest.raises(ValueError):
        gate(diff, float("nan"))


def test_the_html_page_carries_the_same_comparison(resnet_runs):
    diff = compare_results(*resnet_runs)
    page = render_compare_html(diff, ("runs/h200-resnet50", "runs/h200-resnet50-50steps"))
    assert "unchanged: within the steps&#x27; spread" in page
    assert "Content-Security-Policy" in page and "<script" not in page
    example = json.loads(OLD_ANALYSIS.read_text())
    page = render_compare_html(compare_results(example, resnet_runs[1]), ("session 2", "runs/h200-resnet50-50steps"))
    assert "Not checked in B" in page


def test_different_modes_are_flagged(results):
    other = copy.deepcopy(results)
    other["mode"] = "cpu-only" if results["mode"] != "cpu-only" else "hybrid"
    assert any("modes differ" in note for note in compare_results(results, other)["notes"])


def test_a_fix_that_leaves_nothing_to_list_is_resolved():
    """resnet50 at fp32, then at PyTorch's default precision (cuDNN TF32 on): FP32 GEMM time falls from
    31.3 to 0.04 ms a step, so the FP32-GEMM finding is gone and no FP32 conv layer is left to name. A
    list of names that is absent because it is empty is no missing measurement: resolved, not 'not
    checked'."""
    fp32, default = analyze_run_dir(RUNS / "h200-resnet50"), analyze_run_dir(RUNS / "h200-resnet50-default")
    assert "gemm_fp32_layers" in fp32["metrics"] and "gemm_fp32_layers" not in default["metrics"]
    findings = compare_results(fp32, default)["findings"]
    assert "tensor.fp32_gemm" in {f["id"] for f in findings["resolved"]}
    assert "tensor.fp32_gemm" not in {f["id"] for f in findings["not_checked_in_b"]}
