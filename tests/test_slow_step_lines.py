"""The script's lines whose sampled host time grows on the slow steps (`slow_step_extra_lines`), on real
captures: sentence-transformers' encode loop and the HF BERT loop (H200/H100 nsys samples); a capture
without Python samples names none."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
UNMARKED = FIXTURES / "unmarked_runs"
NAMED = re.compile(r"(\S+\.py:\d+)(?: through (\S+:\d+ \S+))? \(\+([\d.]+) ms\)")


@pytest.fixture(scope="module")
def encode(analyzed_copy) -> dict:
    return analyzed_copy(UNMARKED / "sentence_transformers_encode" / "run")


def _jitter(doc: dict) -> dict:
    return next(f for f in doc["diagnosis"]["bottlenecks"] if f["id"] == "steps.jitter")


def test_the_slow_steps_extra_host_time_is_placed_at_lines_and_the_library_code_under_them(encode):
    lines = encode["metrics"]["slow_step_extra_lines"]
    assert lines["source"] == "measured:nsys"
    named = NAMED.findall(lines["value"])
    assert named and all(line == "sentence_transformers_encode.py:23" for line, _, _ in named)
    assert {site.split("/")[0] for _, site, _ in named} == {"transformers"}
    # Each named line holds a tenth of the slow steps' extra time or more, largest first.
    extra = [float(ms) for _, _, ms in named]
    assert extra == sorted(extra, reverse=True)
    assert min(extra) >= 0.1 * encode["metrics"]["slow_step_extra_ms"]["value"]


def test_the_advice_names_the_line_instead_of_asking_for_a_profiler(encode):
    jitter = _jitter(encode)
    texts = [a["text"] for a in jitter["advice"]]
    assert texts[0].startswith("Look at sentence_transformers_encode.py:23 through transformers/")
    assert not any("py-spy" in t for t in texts)
    # It names no change of its own: the variation is the host work the preprocessing finding claims.
    assert jitter["alternative_to"] == ["cpu.preprocessing"]


def test_a_loop_whose_slow_steps_run_new_shapes_places_them_too(analyzed_copy):
    doc = analyzed_copy(UNMARKED / "hf_bert_classifier_loop" / "run")
    named = NAMED.findall(doc["metrics"]["slow_step_extra_lines"]["value"])
    assert named[0][:2] == (
        "hf_bert_classifier_loop.py:46",
        "transformers/integrations/sdpa_attention.py:158 sdpa_attention_forward",
    )


def test_without_python_samples_no_line_is_named(analyzed_copy):
    """cpu_roundtrip (H200) has a slow step but its nsys pass sampled no Python."""
    doc = analyzed_copy(FIXTURES / "planted" / "cpu_roundtrip" / "run")
    assert "slow_steps" in doc["metrics"] and "slow_step_extra_lines" not in doc["metrics"]
