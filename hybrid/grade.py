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
    its share of the plain step, where there is one); move the findings whose weighed share fell
    below their rule's floor (the replay found the fix saves almost nothing) to
    `diagnosis.below_floor`; order the bottlenecks by severity, then weighed time lost, and take the
    primary as the one that saves most. `not_measured` placeholders keep LOW and go last."""
    diagnosis = analysis.get("diagnosis")
    if not isinstance(diagnosis, dict) or not diagnosis.get("bottlenecks"):
        return
    timing = analysis.get("timing") or {}
    step_ms = _weighed_step_ms(timing)
    baseline_ms = timing.get("baseline_step_time_ms")
    kept, below = [], []
    for finding in diagnosis["bottlenecks"]:
        if finding.get("not_measured") or not step_ms:
            kept.append(finding)
            continue
        if baseline_ms and finding.get("time_lost_baseline_ms") is not None:
            finding["time_lost_baseline_pct"] = 100.0 * finding["time_lost_baseline_ms"] / baseline_ms
        share = 100.0 * weighed_lost_ms(finding, timing) / step_ms
        assumed = any(item.get("label") == ASSUMES_LABEL for item in finding.get("evidence") or [])
        finding["severity"] = severity_for(share, assumed=assumed)
        if share < (finding.get("floor_pct") or 0.0):
            below.append({"id": finding.get("id"), "title": finding.get("title"), "time_lost_ms": finding.get("time_lost_ms"),
                          "weighed_lost_ms": weighed_lost_ms(finding, timing), "weighed_pct": share,
                          "floor_pct": finding["floor_pct"], "time_lost_method": finding.get("time_lost_method")})
        else:
            kept.append(finding)
    diagnosis["bottlenecks"] = sorted(
        kept, key=lambda f: (bool(f.get("not_measured")), -SEVERITY_RANK.get(f.get("severity"), -1),
                             -weighed_lost_ms(f, timing), str(f.get("id"))))
    if below:
        diagnosis["below_floor"] = below
    # An alternative remedy for time other findings own is never the primary.
    candidates = [f for f in kept if not f.get("not_measured") and not f.get("alternative_to")
                  and weighed_lost_ms(f, timing) > 0]
    diagnosis["primary_bottleneck"] = (dict(max(candidates, key=lambda f: weighed_lost_ms(f, timing)))
                                       if candidates else None)
