"""Shared by the rule families: severity from time lost, and building a Finding from metric names."""

from __future__ import annotations

from hybrid.provenance import ESTIMATED
from hybrid.rules.advice import Suggestion
from hybrid.rules.base import SEVERITY_RANK, Context, Evidence, Finding

# Severity from the share of the step a finding costs. A third of the step is a >1.4x speedup when
# fixed (CRITICAL); 15% is well outside run-to-run noise of a steady loop (SEVERE); 5% is the
# smallest gain worth a code change (MODERATE); below that the finding is informative (LOW).
SEVERITY_FLOORS = (("CRITICAL", 30.0), ("SEVERE", 15.0), ("MODERATE", 5.0))
# Tuned library kernels reach about 80% of the roofline (cuBLAS large GEMMs ~70-80% of tensor peak,
# streaming kernels ~85-90% of DRAM bandwidth); estimates of what a fix recovers aim at that ceiling.
PRACTICAL_ROOFLINE_PCT = 80.0
# An estimate that rests on a premise the run did not measure (that per-step costs stay fixed when the
# batch doubles, that a documented slowdown applies here) can point somewhere worth a look, but not
# outrank what was measured: its severity stops here, whatever the time it claims.
ASSUMED_SEVERITY_CAP = "MODERATE"


def severity_for(lost_pct: float) -> str:
    for severity, floor in SEVERITY_FLOORS:
        if lost_pct >= floor:
            return severity
    return "LOW"


def lost_pct(ctx: Context, lost_ms: float) -> float:
    step = ctx.value("step_time_ms") or 0.0
    return 100.0 * lost_ms / step if step else 0.0


def on_analyzed_clock(ctx: Context, torch_clock_ms: float) -> float:
    """A duration the torch pass measured on its own clock (inside its record_function ranges), as the
    same share of the analyzed step when the timeline analyzed is another pass's: the collectors slow a
    step differently (graph_breaks on the H200: 17.8 ms a step under torch.profiler, 12.9 under nsys)."""
    torch_step, step = ctx.value("torch_pass_step_time_ms"), ctx.value("step_time_ms")
    if not torch_step or not step:
        return torch_clock_ms
    return torch_clock_ms * step / torch_step


def evidence(ctx: Context, pairs: list[tuple[str, str]]) -> list[Evidence]:
    """Evidence for each (label, metric name) present in the context; absent metrics are skipped."""
    return [ctx.evidence(label, name) for label, name in pairs if name in ctx.metrics]


def claimed_ms(ctx: Context, *rule_ids: str) -> float:
    """Time lost that the findings of these rules claim on this context. A rule that sees time another
    rule already explains (the same GEMMs through ncu's pipe figure, the same idle gaps through host
    op times) names the owners here and counts only what they leave, so one cause is never counted twice."""
    from hybrid.rules.registry import RULES  # the registry imports every family, this module included

    by_id = {rule.id: rule for rule in RULES}
    total = 0.0
    for rule_id in rule_ids:
        found = by_id[rule_id].evaluate(ctx)
        if found is not None and not found.not_measured:
            total += found.time_lost_ms
    return total


def finding(ctx: Context, *, id: str, title: str, category: str, pairs: list[tuple[str, str]],
            explanation: str, suggestions: list[Suggestion], lost_ms: float,
            extra: list[Evidence] | None = None, assumes: str | None = None) -> Finding:
    """`assumes` names the unmeasured premise of the time-lost estimate: it is shown as evidence and
    caps the severity at ASSUMED_SEVERITY_CAP. Suggestions already switched on are left out by their
    rules (hybrid.rules.advice); each keeps the condition that made it apply."""
    lost_ms = max(0.0, float(lost_ms))
    pct = lost_pct(ctx, lost_ms)
    severity = severity_for(pct)
    extra = list(extra or [])
    if assumes:
        extra.append(Evidence("time lost assumes", assumes, "", ESTIMATED))
        if SEVERITY_RANK[severity] > SEVERITY_RANK[ASSUMED_SEVERITY_CAP]:
            severity = ASSUMED_SEVERITY_CAP
    return Finding(id=id, title=title, category=category, severity=severity,
                   evidence=evidence(ctx, pairs) + extra, explanation=explanation,
                   suggestions=[s.render() for s in suggestions], time_lost_ms=lost_ms, time_lost_pct=pct,
                   advice=[s.to_dict() for s in suggestions])


def counters_advice(ctx: Context) -> list[Suggestion]:
    """How to get hardware counters, from how this run's ncu pass went: rerunning with --mode hybrid is
    advice only for a run whose ncu pass did not run."""
    status = ctx.pass_status.get("ncu")
    if status == "ok":
        return [Suggestion("Profile these kernels with ncu: raise --ncu-kernels, or read the rank ncu ran on "
                           "(`hybrid report RUN_DIR --rank K`)",
                           "the ncu pass ran but measured none of this step's kernels")]
    if status is not None:
        return [Suggestion("Fix the ncu pass (its log is RUN_DIR/ncu/console.log; reading GPU counters needs "
                           "NVreg_RestrictProfilingToAdminUsers=0 or root) and rerun",
                           f"the ncu pass of this run ended {status}")]
    return [Suggestion("Run `hybrid run --mode hybrid ...` so the ncu pass collects hardware counters (needs ncu and "
                       "permission to read GPU counters: NVreg_RestrictProfilingToAdminUsers=0 or root)",
                       "no ncu pass ran in this run")]


def not_measured(ctx: Context, *, id: str, title: str, category: str, explanation: str) -> Finding:
    """A family that needs hardware counters says what it could not see and how to get it."""
    advice = counters_advice(ctx)
    return Finding(id=id, title=title, category=category, severity="LOW", evidence=[],
                   explanation=explanation, suggestions=[s.render() for s in advice],
                   advice=[s.to_dict() for s in advice], not_measured=True)


def has_counters(ctx: Context) -> bool:
    return not ctx.profile.counters.empty
