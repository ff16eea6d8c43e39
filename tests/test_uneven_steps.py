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
MODES = ("shapes", "same", "first")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("uneven")

    def run(mode: str) -> dict:
        out = root / mode
        done = run_hybrid("run", "--steps", "12", "--warmup", "3", "--out", str(out), str(SCRIPT), mode)
        assert done.returncode == 0, done.stderr
        return json.loads((out / "results.json").read_text())

    # Two at a time: with a third concurrent run on the 2-core CI box (bff06a5) the 'shapes' run had no
    # step-time finding; six concurrent runs here took its saving from 28-40 ms down to 5 ms a step.
    with ThreadPoolExecutor(2) as pool:
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


def test_a_size_met_for_the_first_time_is_a_new_shape_though_later_steps_reuse_it(results):
    # Every 4th step brings a size the op plans once; the typical steps after it run that size at no cost.
    run = results["first"]
    assert "uneven::work" in run["metrics"]["slow_step_extra_ops"]["value"]
    shapes = run["metrics"]["slow_step_new_shapes"]["value"]
    assert shapes.startswith("uneven::work [[") and shapes != "none"
    (advice,) = _jitter(run)["suggestions"]
    assert "Look for what slowed the host" not in advice
    # The op's rows are the input whose size changes (296, 304, 312, 320 on the CPU box): padded to a
    # multiple that leaves fewer sizes, each planned once.
    assert run["metrics"]["step_varying_input"]["value"] == "uneven::work [L, 64]"
    assert advice.startswith("Pad the step's inputs to a multiple of ")
    assert "so the work each new size costs runs once per size" in advice
