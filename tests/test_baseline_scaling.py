"""Time lost at the plain step (`time_lost_baseline_ms`), on a real run with a plain pass."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hybrid.pipeline import analyze_run_dir
from hybrid.report.html_report import render_html
from hybrid.report.terminal import render_terminal

RUN = Path(__file__).parent / "fixtures" / "runs" / "h200-resnet50-50steps"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    run = tmp_path_factory.mktemp("run") / "run"
    shutil.copytree(RUN, run)
    return analyze_run_dir(run)


def test_each_finding_gives_its_time_at_the_plain_step(results):
    plain = next(p["step_time_ms"] for p in results["passes"] if p["name"] == "plain")
    step = results["timing"]["step_time_ms"]
    assert results["timing"]["baseline_step_time_ms"] == plain
    for finding in [*results["diagnosis"]["bottlenecks"], results["diagnosis"]["primary_bottleneck"]]:
        assert finding["time_lost_baseline_ms"] == pytest.approx(finding["time_lost_ms"] * plain / step)


def test_renderers_show_it(results):
    primary = results["diagnosis"]["primary_bottleneck"]
    text = render_terminal(results, verbose=False, color=False)
    assert " plain " in text.splitlines()[next(i for i, line in enumerate(text.splitlines()) if "lost/step" in line)]
    assert f"{primary['time_lost_baseline_ms']:.3g} ms at the plain step" in render_html(results)
