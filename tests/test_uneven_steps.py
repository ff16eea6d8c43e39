"""Slow steps whose extra host time is in one op (tests/scripts/uneven_steps.py), run through `hybrid run` on
the CPU: the advice follows the op's input shapes on the slow steps. Shapes no typical step ran: pad or
bucket them, naming the shapes. The shapes the typical steps ran: the step's own work did not change, so
padding is no advice (the gc.freeze() twin of gc_every_fourth_step was told to pad inputs it never varied)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from hybrid_cli import ROOT, run_hybrid

SCRIPT = ROOT / "tests" / "scripts" / "uneven_steps.py"
MODES = ("shapes", "same")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("uneven")

    def run(mode: str) -> dict:
        out = root / mode
        done = run_hybrid("run", "--steps", "12", "--warmup", "3", "--out", str(out), str(SCRIPT), mode)
        assert done.returncode == 0, done.stderr
        return json.loads((out / "results.json").read_text())

    with ThreadPoolExecutor(len(MODES)) as pool:
        return dict(zip(MODES, pool.map(run, MODES), strict=True))


def _jitter(results: dict) -> dict:
    (finding,) = [f for f in results["diagnosis"]["bottlenecks"] if f["id"] == "steps.jitter"]
    return finding


def test_inputs_of_other_shapes_on_the_slow_steps_are_named_and_padding_is_the_advice(results):
    run = results["shapes"]
    assert "uneven::work" in run["metrics"]["slow_step_extra_ops"]["value"]
    shapes = run["metrics"]["slow_step_new_shapes"]["value"]
    # The op that grows most first; the model's Linear, fed the same rows, may follow (it did under load).
    assert shapes.startswith("uneven::work [[2048, 64], []] (typical: [[256, 64], []])")
    (advice,) = _jitter(run)["suggestions"]
    assert advice.startswith(
        "Give the ops that grew on the slow steps the same inputs every step: pad or bucket"
    )
    assert shapes in advice


def test_the_same_inputs_taking_longer_get_no_padding_advice(results):
    run = results["same"]
    assert "uneven::work" in run["metrics"]["slow_step_extra_ops"]["value"]
    assert run["metrics"]["slow_step_new_shapes"]["value"] == "none"
    (advice,) = _jitter(run)["suggestions"]
    assert "pad" not in advice
    assert advice.startswith("Look for what slowed the host on the slow steps")
    assert "with the input shapes the typical steps ran" in advice
