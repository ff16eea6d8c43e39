from pathlib import Path

import pandas as pd
import pytest

from hybrid.analysis.analyze import analyze
from hybrid.load.ncu_match import attach_counters
from hybrid.load.nsys_export import load_nsys_export
from hybrid.load.torch_trace import load_torch_trace
from hybrid.profile import STEP_COLUMNS, Profile, conform
from hybrid.schema import missing_keys
from nsight.ncu_csv import read_ncu_csv

FIXTURES = Path(__file__).parent / "fixtures" / "h200-probe"
ANALYSIS_KEYS = ("device", "timing", "metrics", "roofline", "diagnosis", "limitations")


def _with_lead_keys(result: dict) -> dict:
    return {
        **result,
        "schema_version": "1.0",
        "mode": "nsys",
        "tools": {},
        "passes": [],
        "warnings": [],
        "workload": {"command": "x", "steps_measured": 1, "warmup_steps": 0},
    }


@pytest.fixture(scope="module")
def nsys_result():
    return analyze(load_nsys_export(FIXTURES / "nsys_matmul_copy.sqlite")).document


def test_probe_workload_is_diagnosed_as_pageable_copies_then_syncs(nsys_result):
    diagnosis = nsys_result["diagnosis"]
    primary = diagnosis["primary_bottleneck"]
    assert primary["id"] == "copy.pageable"
    assert primary["severity"] == "CRITICAL"
    # The 32 MiB pageable copy takes ~3.7 ms of a ~4.5 ms step at ~9 GB/s.
    assert 2.0 < primary["time_lost_ms"] < nsys_result["timing"]["step_time_ms"]
    ids = [f["id"] for f in diagnosis["bottlenecks"]]
    assert "sync.per_step" in ids
    sync = next(f for f in diagnosis["bottlenecks"] if f["id"] == "sync.per_step")
    assert any(e["label"] == "syncs per step" and e["value"] == 2 for e in sync["evidence"])
    assert all(
        e["source"] in ("measured:nsys", "estimated", "spec")
        for f in diagnosis["bottlenecks"]
        for e in f["evidence"]
    )


def test_ranking_is_by_time_lost_and_notes_never_lead(nsys_result):
    findings = nsys_result["diagnosis"]["bottlenecks"]
    measured = [f for f in findings if not f["not_measured"]]
    assert [f["time_lost_ms"] for f in measured] == sorted(
        (f["time_lost_ms"] for f in measured), reverse=True
    )
    notes = [f for f in findings if f["not_measured"]]
    assert {f["category"] for f in notes} == {"OCCUPANCY", "MEMORY_HIERARCHY", "TENSOR_CORE"}
    assert findings[-len(notes) :] == notes and all(f["severity"] == "LOW" for f in notes)


def test_result_satisfies_the_schema(nsys_result):
    assert missing_keys(_with_lead_keys(nsys_result)) == []
    assert nsys_result["top_kernels"][0]["source"] == "measured:nsys"
    assert any("outlier" in text for text in nsys_result["limitations"])


def test_counters_replace_the_not_measured_notes():
    profile = attach_counters(
        load_nsys_export(FIXTURES / "nsys_matmul_copy.sqlite"),
        read_ncu_csv(FIXTURES / "ncu_metrics_stdout.csv"),
    )
    result = analyze(profile).document
    assert not any(f["not_measured"] for f in result["diagnosis"]["bottlenecks"])
    assert result["metrics"]["ncu_l2_hit_pct"]["source"] == "measured:ncu"
    assert result["diagnosis"]["primary_bottleneck"]["id"] == "copy.pageable"


def test_torch_only_trace_finds_the_pageable_readback():
    result = analyze(load_torch_trace(FIXTURES / "torch_trace.json")).document
    ids = [f["id"] for f in result["diagnosis"]["bottlenecks"]]
    assert "copy.pageable" in ids and "sync.per_step" in ids
    assert result["roofline"]["source"] == "estimated"
    assert missing_keys(_with_lead_keys(result)) == []


def test_cpu_only_run_reports_no_gpu_findings():
    steps = pd.DataFrame(
        {
            "step": [0, 1, 2],
            "name": ["step 0", "step 1", "step 2"],
            "start_ns": [0, 10_000_000, 20_000_000],
            "end_ns": [9_000_000, 19_500_000, 29_000_000],
        }
    )
    profile = Profile(steps=conform(steps, STEP_COLUMNS), extras={"cuda_available": False})
    result = analyze(profile).document
    assert result["diagnosis"]["bottlenecks"] == [] and result["diagnosis"]["primary_bottleneck"] is None
    assert any("GPU analysis" in text for text in result["limitations"])
    assert result["timing"]["step_time_ms"] == pytest.approx((9 + 9.5 + 9) / 3)
