"""No finding keeps a closed-form time lost without saying why (issue 23 item 4): on every committed GPU
capture that can be re-analyzed (run directories with a torch trace or an nsys export, torchrun jobs, and
bare nsys exports), each finding whose `time_lost_method` is "model" (or "corrected" by verified runs)
carries a `replay_reason`, and the renderers show it."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from hybrid.analysis.job_metrics import is_job_dir
from hybrid.pipeline import analyze_export, analyze_job, analyze_run_dir
from hybrid.report.html_report import render_html
from hybrid.report.terminal import render_terminal
from hybrid.rundir import RunDir

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _captures() -> list[Path]:
    found = []
    for run_json in sorted(FIXTURES.glob("**/run.json")):
        folder = run_json.parent
        if folder.name.startswith("rank-"):
            continue  # analyzed with its job
        if (
            is_job_dir(folder)
            or RunDir(folder).nsys_export() is not None
            or RunDir(folder).torch_trace() is not None
        ):
            found.append(folder)
    return found


def _exports() -> list[Path]:
    """nsys exports committed without a run directory around them (unmarked scripts' bare captures); a job
    rank's export is analyzed with its job."""
    return sorted(
        p
        for p in FIXTURES.glob("**/*.sqlite")
        if not (p.parent.parent / "run.json").is_file()
        and not any(part.startswith("rank-") for part in p.parts)
    )


CAPTURES = _captures()
EXPORTS = _exports()
EXPLAINED = ("model", "corrected")  # methods whose figure is not the replay's own


def test_the_committed_gpu_captures_are_all_found():
    # 20 planted, 3 callsite, 6 precision, 5 model runs, 1 unmarked, 3 DDP jobs; 9 bare unmarked exports,
    # 2 callsite exports and the H200 probe's.
    assert len(CAPTURES) >= 38 and len(EXPORTS) >= 12


def _analyze(capture: Path) -> dict:
    if capture.suffix == ".sqlite":
        return analyze_export(capture)
    return analyze_job(capture) if is_job_dir(capture) else analyze_run_dir(capture)


@pytest.mark.slow
@pytest.mark.parametrize("capture", CAPTURES + EXPORTS, ids=lambda p: "/".join(p.relative_to(FIXTURES).parts))
def test_every_model_figure_says_why(capture):
    results = _analyze(capture)
    diagnosis = results["diagnosis"]
    findings = [
        *diagnosis["bottlenecks"],
        *([diagnosis["primary_bottleneck"]] if diagnosis["primary_bottleneck"] else []),
    ]
    unexplained = [
        f["id"] for f in findings if f.get("time_lost_method") in EXPLAINED and not f.get("replay_reason")
    ]
    assert unexplained == []
    shown = [
        f
        for f in diagnosis["bottlenecks"][:3]
        if f.get("time_lost_method") == "model" and not f.get("not_measured")
    ]
    if shown:
        reason = shown[0]["replay_reason"]
        assert reason[:40] in " ".join(render_terminal(results, verbose=True, color=False).split())
        assert f"not replayed: {html.escape(reason[:40], quote=True)}" in render_html(results)
