"""Severity and order of the findings from their final time lost: the last step of the analysis, after
the replay has replaced closed forms with replayed savings and the plain pass has weighed them.

A rule grades its finding from its own closed form; the replay can then shrink that figure (resnet50's
small-grid finding: 1.57 ms modeled, 0.65 µs replayed), and a collector that slowed the step makes a
share of the profiled step overstate the share of the real one. So the grade is taken again here,
from the figure the report leads with: the saving on the plain step when findings are weighed there
(`timing.weighed_at_plain_step`), else the saving on the measured step."""

from __future__ import annotations

from hybrid.rules.base import SEVERITY_RANK
from hybrid.rules.engine import ASSUMES_LABEL, severity_for


def weighed_lost_ms(finding: dict, timing: dict) -> float:
    """The time a fix would save per step, on the step the findings are weighed at."""
    if timing.get("weighed_at_plain_step") and finding.get("time_lost_baseline_ms") is not None:
        return float(finding["time_lost_baseline_ms"])
    return float(finding.get("time_lost_ms") or 0.0)


def _weighed_step_ms(timing: dict) -> float | None:
    if timing.get("weighed_at_plain_step") and timing.get("baseline_step_time_ms"):
        return float(timing["baseline_step_time_ms"])
    return timing.get("step_time_ms") or timing.get("replay_step_time_ms")


def grade(analysis: dict) -> None:
    """Set each measured finding's severity from its weighed time lost (and `time_lost_baseline_pct`,
    its share of the plain step, where there is one), and order the bottlenecks by severity, then
    weighed time lost. `not_measured` placeholders keep LOW and go last."""
    diagnosis = analysis.get("diagnosis") or {}
    timing = analysis.get("timing") or {}
    step_ms = _weighed_step_ms(timing)
    baseline_ms = timing.get("baseline_step_time_ms")
    primary = diagnosis.get("primary_bottleneck")
    for finding in [*diagnosis.get("bottlenecks", []), *([primary] if primary else [])]:
        if finding.get("not_measured"):
            continue
        if baseline_ms and finding.get("time_lost_baseline_ms") is not None:
            finding["time_lost_baseline_pct"] = 100.0 * finding["time_lost_baseline_ms"] / baseline_ms
        if step_ms:
            assumed = any(item.get("label") == ASSUMES_LABEL for item in finding.get("evidence") or [])
            finding["severity"] = severity_for(100.0 * weighed_lost_ms(finding, timing) / step_ms, assumed=assumed)
    if diagnosis.get("bottlenecks"):
        diagnosis["bottlenecks"] = sorted(
            diagnosis["bottlenecks"],
            key=lambda f: (bool(f.get("not_measured")), -SEVERITY_RANK.get(f.get("severity"), -1),
                           -weighed_lost_ms(f, timing), str(f.get("id"))))
