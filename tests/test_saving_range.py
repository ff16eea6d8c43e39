"""The plain-step saving over the host speeds that replay the plain step (`time_lost_baseline_range_ms`),
on real captures: compiled_train_mlp (H200) fits 0.67-0.84 of its profiled host, hf_bert_classifier_loop
(H100) a range under 1% wide."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.replay.corrected import _correct
from hybrid.replay.realized import Correction
from hybrid.report.html_report import render_html
from hybrid.report.terminal import render_terminal
from hybrid.report.verified import RANGE_SHOWN_PCT, range_note
from hybrid.rules.base import Finding
from hybrid.rules.switches import COMPILE

UNMARKED = Path(__file__).parent / "fixtures" / "unmarked_runs"


@pytest.fixture(scope="module")
def mlp(analyzed_copy) -> dict:
    return analyzed_copy(UNMARKED / "compiled_train_mlp" / "run")


def _finding(doc: dict, finding_id: str) -> dict:
    return next(f for f in doc["diagnosis"]["bottlenecks"] if f["id"] == finding_id)


def test_a_wide_host_fit_gives_each_replayed_saving_its_range(mlp):
    lower, upper = mlp["timing"]["replay_host_scale_range"]
    assert upper > 1.1 * lower
    fusion = _finding(mlp, "compile.fusible_elementwise")
    low, high = fusion["time_lost_baseline_range_ms"]
    assert 0 < low < fusion["time_lost_baseline_ms"] < high <= mlp["timing"]["baseline_step_time_ms"]
    # A device-side fix on a step the host nearly bounds: where the host's plain speed lies decides how much
    # of the fused kernels' time leaves the step, by more than the ±20% predictions are scored at.
    assert fusion["time_lost_baseline_ms"] - low > RANGE_SHOWN_PCT / 100 * fusion["time_lost_baseline_ms"]
    # A closed form is not replayed at the edges.
    assert all(
        "time_lost_baseline_range_ms" not in f
        for f in mlp["diagnosis"]["bottlenecks"]
        if f["time_lost_method"] == "model"
    )


def test_the_renderers_say_the_range_beside_the_figure(mlp):
    fusion = _finding(mlp, "compile.fusible_elementwise")
    label, text = range_note(fusion, mlp["timing"])
    lower, upper = mlp["timing"]["replay_host_scale_range"]
    assert label == "range" and f"({lower:.2f}-{upper:.2f} of the profiled host's time)" in text
    terminal = " ".join(render_terminal(mlp, verbose=False, color=False).split())
    assert f"range: {' '.join(text.split())}" in terminal
    assert "at the host speeds that replay the plain step" in render_html(mlp)
    # Within ±20% of the figure the range is left to results.json.
    narrow = {**fusion, "time_lost_baseline_range_ms": [0.9 * fusion["time_lost_baseline_ms"]] * 2}
    assert range_note(narrow, mlp["timing"]) is None


def test_a_narrow_host_fit_gives_no_range(analyzed_copy):
    doc = analyzed_copy(UNMARKED / "hf_bert_classifier_loop" / "run")
    lower, upper = doc["timing"]["replay_host_scale_range"]
    assert upper <= 1.1 * lower
    assert not any("time_lost_baseline_range_ms" in f for f in doc["diagnosis"]["bottlenecks"])
    assert "at the host speeds that replay" not in render_terminal(doc, verbose=True, color=False)


def test_a_verified_correction_scales_the_range_with_the_figure(mlp):
    fusion = _finding(mlp, "compile.fusible_elementwise")
    finding = Finding(
        **{
            key: fusion[key]
            for key in (
                "id",
                "title",
                "category",
                "severity",
                "explanation",
                "suggestions",
                "time_lost_ms",
                "time_lost_baseline_ms",
                "time_lost_baseline_range_ms",
                "time_lost_method",
            )
        },
        evidence=[],
    )
    _correct(finding, COMPILE, Correction("compile", "replay", 0.5, (0.5, 0.5, 0.5)), mlp["timing"], 6.57)
    assert finding.time_lost_baseline_range_ms == pytest.approx(
        [edge / 2 for edge in fusion["time_lost_baseline_range_ms"]]
    )
    assert finding.correction["time_lost_baseline_range_ms"] == fusion["time_lost_baseline_range_ms"]


def test_a_verified_finding_says_its_range_beside_the_prediction(mlp, analyzed_copy):
    """The verify line of tc_fp16_unaligned_compile's compile, on compiled_train_mlp's fusion finding: the
    range goes beside the predicted figure the realized saving is read against."""
    from hybrid.report.verified import verify_line

    verified = analyzed_copy(
        Path(__file__).parent / "fixtures" / "verify" / "tc_fp16_unaligned_compile" / "run"
    )
    block = _finding(verified, "compile.fusible_elementwise")["verify"]
    fusion = _finding(mlp, "compile.fusible_elementwise")
    line = verify_line({**fusion, "verify": {**block, "predicted_ms": fusion["time_lost_baseline_ms"]}})
    low, high = fusion["time_lost_baseline_range_ms"]
    assert f"predicted 1.22 ms ({low * 1000:.0f} µs to {high:.3g} ms at the host speeds" in line
