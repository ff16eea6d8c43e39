"""The diagnosis after the rules: the findings as typed objects, passed through the declared stages
(hybrid.pipeline.stages: callsites, weighing at the plain step, replay, verified fixes, grade) and
written into results.json once, by Diagnosis.to_results. One ordering and one primary for single runs and
torchrun jobs alike.

Grading is the last stage. A rule grades its finding from its own closed form; the replay can then
shrink that figure (resnet50's small-grid finding: 1.57 ms modeled, 0.65 µs replayed), and a collector
that slowed the step makes a share of the profiled step overstate the share of the real one. So the
grade is taken again from the figure the report leads with: the saving `--verify` realized where it
measured one, else the saving on the plain step when findings are weighed there
(`timing.weighed_at_plain_step`), else the saving on the measured step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hybrid.hardware import Peaks
from hybrid.ledger import Ledger
from hybrid.profile import Profile
from hybrid.provenance import Metric
from hybrid.rules.base import SEVERITY_RANK, Finding
from hybrid.rules.engine import ASSUMES_LABEL, severity_for

# A collector that slowed the analyzed step by more than this (vs the plain pass) distorts the diagnosis:
# the headline says so and findings are weighed at the plain step. Below it, the run-to-run spread of a
# steady loop (a few %) and the collectors' usual cost on large-kernel models (<1% for resnet50) sit.
COLLECTOR_DISTORTION_PCT = 10.0


@dataclass
class Analyzed:
    """What the stages read, built once by the analysis: the analyzed profile and the run's others that
    may carry Python stacks (the torch pass's, on its own clock), its metrics, ledger and peaks, and
    what the run measured beside it (the plain step, the GPU's calibration, the script)."""

    profile: Profile
    metrics: dict[str, Metric]
    peaks: Peaks
    ledger: Ledger | None = None
    stack_profiles: list[Profile] = field(default_factory=list)
    baseline_step_ms: float | None = None
    calibration: dict | None = None
    script: str | None = None  # the profiled script as the run was given it; None for a foreign export
    script_is_module: bool = False
    # The fixes `hybrid run --verify` switched on and what they realized (hybrid.analysis.verified).
    verified: dict | None = None
    # What verified fixes realized on this GPU before the run (hybrid.replay.realized.snapshot).
    realized_history: dict | None = None


def realized_saving_ms(finding: Finding) -> float | None:
    """The saving `hybrid run --verify` measured for the finding's fix on the plain step, the finding's share
    of it (by prediction) where one switch served several findings; None where the fix realized nothing
    above its own noise (a paired window's spread between its two "on" windows). A measured saving outranks
    a predicted one: on the H200 HF Trainer's TF32 fix realized 4.49 ms (paired) where 2.93 ms was
    predicted, more than the 2.87 ms predicted for its primary; a fix that did not pay keeps the prediction,
    its realized figure shown beside it."""
    verify = finding.verify or {}
    if verify.get("status") != "realized":
        return None
    realized_ms = float(verify.get("realized_ms") or 0.0)
    spread_ms = float((verify.get("paired") or {}).get("spread_ms") or 0.0)
    if realized_ms <= spread_ms:
        return None
    fix_predicted_ms = verify.get("fix_predicted_ms")
    if fix_predicted_ms and fix_predicted_ms > 0:
        return realized_ms * max(float(verify.get("predicted_ms") or 0.0), 0.0) / fix_predicted_ms
    return realized_ms


@dataclass
class Diagnosis:
    """The findings (measured ones and `not_measured` notes), those the grade found below their rule's
    floor, the results' timing block the stages add to, the limitations they found, and the replay of
    every fix at once."""

    findings: list[Finding]
    timing: dict
    limitations: list[str] = field(default_factory=list)
    below_floor: list[dict] = field(default_factory=list)
    replay_all: dict | None = None
    verify_summary: dict | None = None  # what --verify realized against the predictions

    def weighed_lost_ms(self, finding: Finding) -> float:
        """The time the finding's fix saves per step: what `--verify` measured it saving where it did, else
        the prediction on the step the findings are weighed at."""
        measured = realized_saving_ms(finding)
        if measured is not None:
            return measured
        if self.timing.get("weighed_at_plain_step") and finding.time_lost_baseline_ms is not None:
            return float(finding.time_lost_baseline_ms)
        return float(finding.time_lost_ms or 0.0)

    def ordered(self) -> list[Finding]:
        """Severity first, then the time a fix saves; `not_measured` notes last."""
        return sorted(
            self.findings,
            key=lambda f: (
                f.not_measured,
                -SEVERITY_RANK.get(f.severity, -1),
                -self.weighed_lost_ms(f),
                f.id,
            ),
        )

    def primary(self) -> Finding | None:
        """The finding whose fix saves most; an alternative remedy for time other findings own is none."""
        candidates = [
            f
            for f in self.findings
            if not f.not_measured and not f.alternative and self.weighed_lost_ms(f) > 0
        ]
        return max(candidates, key=self.weighed_lost_ms) if candidates else None

    def to_dict(self) -> dict:
        """results.json's `diagnosis` block."""
        bottlenecks = [
            {
                **f.to_dict(),
                "weighed_lost_ms": self.weighed_lost_ms(f),
                "weighed_on": "realized" if realized_saving_ms(f) is not None else "predicted",
            }
            for f in self.ordered()
        ]
        top = self.primary()
        primary = next((dict(b) for b in bottlenecks if top is not None and b["id"] == top.id), None)
        out: dict = {"primary_bottleneck": primary, "bottlenecks": bottlenecks}
        if self.below_floor:
            out["below_floor"] = self.below_floor
        if self.replay_all is not None:
            out["replay_all_fixes"] = self.replay_all
        if self.verify_summary is not None:
            out["verify_summary"] = self.verify_summary
        return out

    def to_results(self, results: dict) -> None:
        """Write the diagnosis, its timing and limitations into the results document."""
        results["timing"] = self.timing
        results["diagnosis"] = self.to_dict()
        results["limitations"] = self.limitations

    @staticmethod
    def combine(
        representative: Diagnosis, ranks: Mapping[int, Diagnosis], job: list[Finding], job_ranks: list[int]
    ) -> Diagnosis:
        """A torchrun job's diagnosis: the job's own findings (communication, straggler), and each rank's
        findings once per rule, from the rank where it costs most (ranks in lockstep gain what the fix
        saves on the rank that gates the step), weighed and ordered as a single run's on the
        representative rank's timing; that rank's below-floor findings and replay of all fixes kept."""
        merged: dict[str, Finding] = {}
        seen: dict[str, list[int]] = {}
        for rank, diagnosis in sorted(ranks.items()):
            for finding in diagnosis.findings:
                seen.setdefault(finding.id, []).append(rank)
                kept = merged.get(finding.id)
                if kept is None or finding.time_lost_ms > kept.time_lost_ms:
                    merged[finding.id] = finding.at_rank(rank)
        for finding_id, finding in merged.items():
            finding.ranks = seen[finding_id]
        for finding in job:
            # The job's own findings: closed forms, or the collectives' replay (hybrid.replay.overlap).
            finding.rank, finding.ranks = None, list(job_ranks)
            finding.time_lost_method = finding.time_lost_method or "model"
        return Diagnosis(
            findings=[*job, *merged.values()],
            timing=representative.timing,
            limitations=representative.limitations,
            below_floor=representative.below_floor,
            replay_all=representative.replay_all,
        )


def _weighed_step_ms(timing: dict) -> float | None:
    if timing.get("weighed_at_plain_step") and timing.get("baseline_step_time_ms"):
        return float(timing["baseline_step_time_ms"])
    return timing.get("step_time_ms") or timing.get("replay_step_time_ms")


def weigh_at_plain_step(diagnosis: Diagnosis, analyzed: Analyzed) -> None:
    """Give each finding `time_lost_baseline_ms`: its time lost as the same share of the step without a
    collector (the plain pass). Collectors slow the host side most (nsys traced launch_batch1_deep_mlp
    at 123.7 ms a step, 50.5 ms plain), and a fix saves time on the plain step (benchmarks/results/
    replay_planted.md scores the scaled estimates against the realized savings). The scaling is
    proportional, a first-order correction: it does not know which part of the step the collector
    slowed; the replay, next, refines it for the findings it can replay."""
    timing = diagnosis.timing
    step_ms = timing.get("step_time_ms")
    baseline_ms = analyzed.baseline_step_ms
    if not baseline_ms or not step_ms:
        return
    timing["baseline_step_time_ms"] = baseline_ms
    overhead_pct = 100.0 * (step_ms / baseline_ms - 1.0)
    timing["collector_overhead_pct"] = overhead_pct
    timing["collector_distorted"] = overhead_pct > COLLECTOR_DISTORTION_PCT
    # The replay, next, weighs at the plain step also where it fits its host to it.
    timing["weighed_at_plain_step"] = timing["collector_distorted"]
    for finding in diagnosis.findings:
        finding.time_lost_baseline_ms = finding.time_lost_ms * baseline_ms / step_ms


def grade(diagnosis: Diagnosis, analyzed: Analyzed) -> None:
    """Set each measured finding's severity from its weighed time lost (and `time_lost_baseline_pct`,
    its share of the plain step, where there is one), and move the findings whose weighed share fell
    below their rule's floor (the replay found the fix saves almost nothing) to `below_floor`.
    `not_measured` placeholders keep LOW."""
    timing = diagnosis.timing
    step_ms = _weighed_step_ms(timing)
    baseline_ms = timing.get("baseline_step_time_ms")
    kept: list[Finding] = []
    for finding in diagnosis.findings:
        if finding.not_measured or not step_ms:
            kept.append(finding)
            continue
        if baseline_ms and finding.time_lost_baseline_ms is not None:
            finding.time_lost_baseline_pct = 100.0 * finding.time_lost_baseline_ms / baseline_ms
        weighed = diagnosis.weighed_lost_ms(finding)
        share = 100.0 * weighed / step_ms
        assumed = any(item.label == ASSUMES_LABEL for item in finding.evidence)
        finding.severity = severity_for(share, assumed=assumed)
        # A fix that saves nothing is no bottleneck whatever its rule's floor: timm ViT inference ranked a
        # LOW "pad to a multiple of 8" for its 3-channel patch embedding at 0 ms among its findings.
        if share < (finding.floor_pct or 0.0) or weighed <= 0.0:
            diagnosis.below_floor.append(
                {
                    "id": finding.id,
                    "title": finding.title,
                    "time_lost_ms": finding.time_lost_ms,
                    "weighed_lost_ms": weighed,
                    "weighed_pct": share,
                    "floor_pct": finding.floor_pct,
                    "time_lost_method": finding.time_lost_method,
                }
            )
        else:
            kept.append(finding)
    diagnosis.findings = kept
    diagnosis.below_floor.sort(key=lambda entry: -entry["weighed_lost_ms"])
