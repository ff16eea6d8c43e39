"""Severity and order come from the final time lost, on the step the findings are weighed at: the
session-3 H200 resnet50 run (nsys slowed the step by 31%, so findings are weighed at the plain step,
and the replay shrank the small-grid finding's closed form of 1.57 ms to 0.65 µs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.report.common import findings_by_impact, weighed_lost_ms
from hybrid.report.terminal import render_terminal
from hybrid.rules.base import SEVERITY_RANK
from hybrid.rules.engine import severity_for

RUN = Path(__file__).resolve().parent / "fixtures" / "runs" / "h200-resnet50-default"


@pytest.fixture(scope="module")
def results(analyzed_copy) -> dict:
    return analyzed_copy(RUN)


def test_findings_are_graded_at_the_plain_step(results):
    timing = results["timing"]
    assert timing["weighed_at_plain_step"] and timing["collector_overhead_pct"] > 10
    findings = [f for f in results["diagnosis"]["bottlenecks"] if not f.get("not_measured")]
    for finding in findings:
        share = 100 * finding["time_lost_baseline_ms"] / timing["baseline_step_time_ms"]
        assert finding["time_lost_baseline_pct"] == pytest.approx(share)
        assumed = any(e["label"] == "time lost assumes" for e in finding["evidence"])
        assert finding["severity"] == severity_for(share, assumed=assumed), finding["id"]
    by_id = {f["id"]: f for f in findings}
    # 23% of the plain step: SEVERE, not the 41% of the profiled step that made it CRITICAL.
    assert by_id["launch.dispatch"]["time_lost_pct"] > 30 and by_id["launch.dispatch"]["severity"] == "SEVERE"
    assert results["diagnosis"]["primary_bottleneck"]["id"] == "launch.dispatch"


def test_a_finding_the_replay_shrinks_below_its_floor_is_left_out(results):
    """The small grid's closed form claimed 1.57 ms; replayed, its fix saves 97.6 µs of the 23.1 ms plain
    step (0.42%; 106 µs before one-block grids left the small grids), under the rule's 2% floor: no
    bottleneck, listed in below_floor."""
    assert "occupancy.small_grid" not in {f["id"] for f in results["diagnosis"]["bottlenecks"]}
    (small,) = [b for b in results["diagnosis"]["below_floor"] if b["id"] == "occupancy.small_grid"]
    assert small["time_lost_method"] == "replay" and small["weighed_pct"] < small["floor_pct"] == 2.0
    assert small["weighed_lost_ms"] == pytest.approx(0.0976, rel=0.05)
    text = " ".join(render_terminal(results, color=False).split())
    # The fusion's device-side saving is under its floor too on this host-bound step (130 µs).
    assert (
        "left out: the time a fix would save is under the rule's floor (compile.fusible_elementwise 130 µs, "
        "occupancy.small_grid 97.6 µs)" in text
    )


def test_order_is_severity_then_weighed_time(results):
    timing = results["timing"]
    keys = [(-SEVERITY_RANK[f["severity"]], -weighed_lost_ms(f, timing)) for f in findings_by_impact(results)]
    assert keys == sorted(keys)


def test_terminal_leads_with_the_plain_figure(results):
    lines = render_terminal(results, color=False).splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("# severity"))
    # "lost/step (plain)" on two lines, over a column as wide as its figures
    assert lines[header - 1].split() == ["lost/step"]
    assert lines[header].split()[2:] == ["(plain)", "%", "profiled", "finding"]
    text = " ".join("\n".join(lines).split())
    # A larger batch is a note on the dispatch finding (peak memory 2% of the GPU), not a ranked finding.
    assert "Memory allows a larger batch" not in text
    dispatch = next(f for f in results["diagnosis"]["bottlenecks"] if f["id"] == "launch.dispatch")
    assert any(e["label"].startswith("a doubled batch would save") for e in dispatch["evidence"])
    # Callsites named the line: no advice on how to find it.
    assert "py-spy" not in text and "at hybrid/models.py:263" in text


def test_a_job_is_ordered_and_graded_as_a_single_run_and_keeps_its_representative_ranks_replay(tmp_path):
    """jobs/h200-ddp-healthy: the job's diagnosis keeps rank 0's replay of every fix and its below-floor
    finding (memory.uncoalesced, 56 µs replayed), ordered and with the primary picked as for one run."""
    import shutil

    from hybrid.pipeline import analyze_job

    job = tmp_path / "job"
    shutil.copytree(RUN.parents[1] / "jobs" / "h200-ddp-healthy", job)
    results = analyze_job(job)
    diagnosis, timing = results["diagnosis"], results["timing"]
    assert "memory.uncoalesced" in {b["id"] for b in diagnosis["below_floor"]}
    assert diagnosis["replay_all_fixes"]["saved_ms"] > 0
    measured = [f for f in diagnosis["bottlenecks"] if not f["not_measured"]]
    keys = [(-SEVERITY_RANK[f["severity"]], -weighed_lost_ms(f, timing)) for f in measured]
    assert keys == sorted(keys)
    candidates = [f for f in measured if not f["alternative_to"] and weighed_lost_ms(f, timing) > 0]
    assert (
        diagnosis["primary_bottleneck"]["id"]
        == max(candidates, key=lambda f: weighed_lost_ms(f, timing))["id"]
    )
    assert all(isinstance(f["ranks"], list) for f in diagnosis["bottlenecks"])


def test_a_finding_whose_fix_saves_nothing_is_left_out_whatever_its_floor(tmp_path):
    """A finding without a floor (tensor.misaligned_dims had none: timm ViT inference once ranked a LOW
    "pad to a multiple of 8" at 0 ms for its 3-channel patch embedding) whose fix saves nothing is listed
    below the floor with its 0 ms, not ranked: tc_fp16_unaligned's finding, graded again with its floor
    and its saving gone."""
    import shutil

    from hybrid.analysis.diagnosis import grade
    from hybrid.pipeline import diagnose_run_dir

    run = tmp_path / "run"
    shutil.copytree(RUN.parents[1] / "planted" / "tc_fp16_unaligned" / "run", run)
    _, diagnosis = diagnose_run_dir(run)
    finding = next(f for f in diagnosis.findings if f.id == "tensor.misaligned_dims")
    assert finding.time_lost_ms > 0
    finding.floor_pct = 0.0
    finding.time_lost_ms = 0.0
    if finding.time_lost_baseline_ms is not None:
        finding.time_lost_baseline_ms = 0.0
    grade(diagnosis, None)  # type: ignore[arg-type]  # grade reads only the diagnosis
    assert finding not in diagnosis.findings
    (dropped,) = [b for b in diagnosis.below_floor if b["id"] == "tensor.misaligned_dims"]
    assert dropped["weighed_lost_ms"] == 0.0 and dropped["floor_pct"] == 0.0
    assert all(diagnosis.weighed_lost_ms(f) > 0 for f in diagnosis.findings if not f.not_measured)
