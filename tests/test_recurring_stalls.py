"""A loop that stalls every 4th step in gc.collect() (tests/scripts/gc_every_fourth_step.py), run through
`hybrid run` on the CPU: the stalls recur, so they stay in the step time, the plain baseline agrees with
the profiled steps, and the finding names the script's gc.collect() line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hybrid_cli import run_hybrid

SCRIPT = Path(__file__).parent / "scripts" / "gc_every_fourth_step.py"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("stalls") / "run"
    done = run_hybrid("run", "--out", str(out), "--warmup", "3", "--steps", "20", str(SCRIPT), "90")
    assert done.returncode == 0, done.stderr
    return json.loads((out / "results.json").read_text())


def test_recurring_stalls_stay_in_the_step_time(results):
    timing = results["timing"]
    # Only the first measured step may be left out (it runs as the collector starts), stall or not.
    assert timing["steps_excluded"] <= 1
    # Before, the stalls were dropped as outliers: a 0.6 ms step against a 38 ms plain step (-98%).
    assert 0.5 < timing["step_time_ms"] / timing["baseline_step_time_ms"] < 2
    assert timing["step_time_ms"] > 3 * timing["step_time_median_ms"]


def test_the_finding_names_the_stride_and_the_gc_collect_line(results):
    primary = results["diagnosis"]["bottlenecks"][0]
    assert primary["id"] == "steps.jitter"
    assert "one every 4 steps" in results["metrics"]["slow_steps"]["value"]
    line = next(
        n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if text.strip() == "gc.collect()"
    )
    assert f"gc.collect() at {SCRIPT.name}:{line}" in primary["suggestions"][0]
    (site,) = primary["callsites"]
    assert (site["file"], site["line"], site["source_line"]) == (SCRIPT.name, line, "gc.collect()")
    # The collector is the periodic work: no second, generic suggestion about it.
    assert len(primary["suggestions"]) == 1


def test_a_noisy_step_beside_the_stalls_keeps_their_stride():
    """The shape CI's 2-core box gave (run 38, '5 of 18: steps 4, 7-8, 12, 16'): collections at steps 4,
    8, 12, 16 and a step 7 over 3x the median (its duration was not printed: 1.5 ms beside 0.35 ms here)."""
    import pandas as pd

    from hybrid.analysis.jitter import _split, _where

    ms = {step: 0.35 for step in range(1, 20)} | {4: 186.0, 7: 1.5, 8: 151.0, 12: 170.0, 16: 162.0}
    start = np.cumsum([0.0] + list(ms.values()))[:-1]
    steps = pd.DataFrame(
        {
            "step": list(ms),
            "start_ns": (start * 1e6).astype("int64"),
            "dur_ns": (np.array(list(ms.values())) * 1e6).astype("int64"),
        }
    )
    dur, slow, _typical, _extra_ms = _split(steps)
    assert _where(slow, dur.index) == ", one every 4 steps: steps 4, 8, 12, 16"
