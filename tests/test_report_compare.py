"""Comparing two runs: findings matched by id, step-time regression for CI gating."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from hybrid.report.compare import compare_results, regressed, render_compare

RESULT_FILES = sorted((Path(__file__).parent / "fixtures" / "results").glob("*.json"))
# Documents with findings and a kernel timeline (every GPU run): the change tests need something to change.
GPU_FILES = [p for p in RESULT_FILES if json.loads(p.read_text())["top_kernels"]]


@pytest.fixture(params=RESULT_FILES, ids=lambda p: p.stem)
def results(request) -> dict:
    return json.loads(request.param.read_text())


@pytest.fixture(params=GPU_FILES, ids=lambda p: p.stem)
def gpu_results(request) -> dict:
    return json.loads(request.param.read_text())


def test_a_run_against_itself_changes_nothing(results):
    diff = compare_results(results, results)
    assert diff["step_time_ms"]["delta"] == 0
    assert diff["findings"]["resolved"] == [] and diff["findings"]["new"] == []
    assert len(diff["findings"]["unchanged"]) == len(results["diagnosis"]["bottlenecks"])
    assert not regressed(diff, 0.0)


def test_slower_run_with_one_finding_fixed_and_one_new(gpu_results):
    results = gpu_results
    after = copy.deepcopy(results)
    after["timing"]["step_time_ms"] = results["timing"]["step_time_ms"] * 1.2
    fixed = after["diagnosis"]["bottlenecks"].pop(0)
    appeared = copy.deepcopy(after["diagnosis"]["bottlenecks"][0])
    appeared["id"], appeared["title"] = "launch.many_small_kernels", "Many tiny kernels"
    after["diagnosis"]["bottlenecks"].append(appeared)
    after["top_kernels"] = after["top_kernels"][1:]

    diff = compare_results(results, after)
    assert diff["step_time_ms"]["delta_pct"] == pytest.approx(20.0)
    assert regressed(diff, 10.0) and not regressed(diff, 25.0)
    assert [f["id"] for f in diff["findings"]["resolved"]] == [fixed["id"]]
    assert [f["id"] for f in diff["findings"]["new"]] == ["launch.many_small_kernels"]
    gone = next(k for k in diff["top_kernels"] if k["name"] == results["top_kernels"][0]["name"])
    assert gone["a"] == results["top_kernels"][0]["total_ms_per_step"]
    assert gone["b"] is None and gone["delta"] is None
    kept = next(k for k in diff["top_kernels"] if k["name"] == results["top_kernels"][1]["name"])
    assert kept["a"] == kept["b"] == results["top_kernels"][1]["total_ms_per_step"] and kept["delta"] == 0

    text = render_compare(diff)
    assert f"Resolved: [{fixed['severity']}] {fixed['title']}" in text
    assert "New: " in text and "+20.0%" in text


def test_different_modes_are_flagged(results):
    other = copy.deepcopy(results)
    other["mode"] = "cpu-only" if results["mode"] != "cpu-only" else "hybrid"
    assert any("modes differ" in note for note in compare_results(results, other)["notes"])
