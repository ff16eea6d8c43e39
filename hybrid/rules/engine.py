"""Applies declared rules to one context: checks each rule's inputs, runs its model, bounds the saving
by the time its ledger pool still holds, applies its floor and builds the finding. A finding draws the
time it claims from its pool, cause by cause in the order the rule lists them, so the next rule reading
the same pool sees only what is left: each nanosecond of the ledger is claimed once, without any rule
evaluating another. Rules run in the order given (the registry lists the specific causes first)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from hybrid.provenance import ESTIMATED
from hybrid.rules.base import SEVERITY_RANK, Context, Evidence, Finding, Inputs, NotMeasured, Report, Rule
from hybrid.rules.common import counters_advice

# Severity from the share of the step a finding costs. A third of the step is a >1.4x speedup when
# fixed (CRITICAL); 15% is well outside run-to-run noise of a steady loop (SEVERE); 5% is the
# smallest gain worth a code change (MODERATE); below that the finding is informative (LOW).
SEVERITY_FLOORS = (("CRITICAL", 30.0), ("SEVERE", 15.0), ("MODERATE", 5.0))
# An estimate that rests on a premise the run did not measure (that per-step costs stay fixed when the
# batch doubles, that a documented slowdown applies here) can point somewhere worth a look, but not
# outrank what was measured: its severity stops here, whatever the time it claims.
ASSUMED_SEVERITY_CAP = "MODERATE"


# The evidence label that carries an estimate's unmeasured premise (and caps its severity).
ASSUMES_LABEL = "time lost assumes"


def severity_for(lost_pct: float, *, assumed: bool = False) -> str:
    """The severity of a finding that costs `lost_pct` of the step; `assumed`: its estimate rests on
    an unmeasured premise (capped at ASSUMED_SEVERITY_CAP)."""
    severity = next((name for name, floor in SEVERITY_FLOORS if lost_pct >= floor), "LOW")
    if assumed and SEVERITY_RANK[severity] > SEVERITY_RANK[ASSUMED_SEVERITY_CAP]:
        return ASSUMED_SEVERITY_CAP
    return severity


def _present(ctx: Context, name: str) -> bool:
    metric = ctx.metrics.get(name)
    return metric is not None and metric.value is not None


def not_measured(ctx: Context, note: NotMeasured, category: str) -> Finding:
    """A family that needs hardware counters says what it could not see and how to get it."""
    advice = counters_advice(ctx)
    return Finding(
        id=note.id,
        title=note.title,
        category=category,
        severity="LOW",
        evidence=[],
        explanation=note.explanation,
        suggestions=[s.render() for s in advice],
        advice=[s.to_dict() for s in advice],
        not_measured=True,
    )


def build_finding(
    ctx: Context,
    rule: Rule,
    report: Report,
    lost_ms: float,
    *,
    missing: list[str],
    alternative_to: list[str],
    pool_ms: float | None = None,
) -> Finding:
    step = ctx.value("step_time_ms") or 0.0
    pct = 100.0 * lost_ms / step if step else 0.0
    severity = severity_for(pct, assumed=bool(report.assumes))
    extra = list(report.extra)
    if report.assumes:
        extra.append(Evidence(ASSUMES_LABEL, report.assumes, "", ESTIMATED))
    evidence = [ctx.evidence(label, name) for label, name in report.pairs if name in ctx.metrics]
    return Finding(
        id=rule.id,
        title=report.title,
        category=rule.category,
        severity=severity,
        evidence=evidence + extra,
        explanation=report.explanation,
        suggestions=[s.render() for s in report.suggestions],
        time_lost_ms=lost_ms,
        time_lost_pct=pct,
        pool=list(rule.pool),
        pool_ms=pool_ms,
        missing_inputs=missing,
        alternative_to=alternative_to,
        advice=[s.to_dict() for s in report.suggestions],
        floor_pct=rule.floor_pct,
    )


def run(rules: Iterable[Rule], ctx: Context) -> list[Finding]:
    """The findings of `rules` on `ctx`, in rule order, alternatives last (ranking is the caller's)."""
    rules = sorted(rules, key=lambda rule: rule.alternative)  # stable: the declared order otherwise
    left = dict(ctx.pools)
    drawn_by: dict[str, list[str]] = {}  # ledger cause -> ids of the findings that drew on it
    findings: list[Finding] = []
    alternatives: list[tuple[Rule, Finding]] = []
    # Findings whose rule decides on this run whether they are another finding's alternative, with that test.
    views: list[tuple[Callable[[Context, Finding, list[Finding]], list[str]], Finding]] = []
    step = ctx.value("step_time_ms") or 0.0
    for rule in rules:
        if not all(_present(ctx, name) for name in rule.requires):
            continue
        if rule.counters is not None and not ctx.has_counters:
            findings.append(not_measured(ctx, rule.counters, rule.category))
            continue
        missing = [name for name in rule.optional if not _present(ctx, name)]
        values = {name: ctx.value(name) for name in rule.requires + rule.optional}
        source = ctx.pools if rule.alternative else left
        pool_ms = sum(max(0.0, source.get(cause, 0.0)) for cause in rule.pool) if rule.pool else None
        if rule.bound is not None and _present(ctx, rule.bound):
            own_ms = max(0.0, float(ctx.value(rule.bound)))
            pool_ms = own_ms if pool_ms is None else min(pool_ms, own_ms)
        inputs = Inputs(
            values=values,
            pool_ms=pool_ms,
            step_ms=step,
            peaks=ctx.peaks,
            roofline=ctx.roofline,
            pools=ctx.pools,
        )
        lost = rule.model(inputs)
        if lost is None:
            continue
        lost = max(0.0, float(lost))
        if pool_ms is not None:
            lost = min(lost, pool_ms)
        if (100.0 * lost / step if step else 0.0) < rule.floor_pct:
            continue
        finding = build_finding(
            ctx, rule, rule.report(ctx, lost), lost, missing=missing, alternative_to=[], pool_ms=pool_ms
        )
        if rule.alternative:
            alternatives.append((rule, finding))
        else:
            finding.claimed = _draw(left, rule.pool, lost)
            for cause in rule.pool:
                drawn_by.setdefault(cause, []).append(rule.id)
        if rule.alternative_when is not None:
            views.append((rule.alternative_when, finding))
        findings.append(finding)
    for rule, finding in alternatives:
        finding.alternative_to = sorted(
            {rule_id for cause in rule.pool for rule_id in drawn_by.get(cause, [])}
        )
    for alternative_when, finding in views:
        others = [f for f in findings if f is not finding and not f.alternative]
        finding.alternative_to = alternative_when(ctx, finding, others)
    return findings


def evaluate(rule: Rule, ctx: Context) -> Finding | None:
    """One rule alone on the context, its pool as measured: its finding, or None."""
    found = run([rule], ctx)
    return found[0] if found else None


def _draw(left: dict[str, float], pool: tuple[str, ...], ms: float) -> dict[str, float]:
    """Take `ms` per step from the pool's causes in order; what was taken from each."""
    taken = {}
    for cause in pool:
        take = min(ms, max(0.0, left.get(cause, 0.0)))
        left[cause] = left.get(cause, 0.0) - take
        ms -= take
        taken[cause] = take
    return taken
