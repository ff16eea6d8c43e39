"""Shared by the rule families: severity from time lost, and building a Finding from metric names."""

from __future__ import annotations

from hybrid.rules.base import Context, Evidence, Finding

# Severity from the share of the step a finding costs. A third of the step is a >1.4x speedup when
# fixed (CRITICAL); 15% is well outside run-to-run noise of a steady loop (SEVERE); 5% is the
# smallest gain worth a code change (MODERATE); below that the finding is informative (LOW).
SEVERITY_FLOORS = (("CRITICAL", 30.0), ("SEVERE", 15.0), ("MODERATE", 5.0))
# Tuned library kernels reach about 80% of the roofline (cuBLAS large GEMMs ~70-80% of tensor peak,
# streaming kernels ~85-90% of DRAM bandwidth); estimates of what a fix recovers aim at that ceiling.
PRACTICAL_ROOFLINE_PCT = 80.0


def severity_for(lost_pct: float) -> str:
    for severity, floor in SEVERITY_FLOORS:
        if lost_pct >= floor:
            return severity
    return "LOW"


def lost_pct(ctx: Context, lost_ms: float) -> float:
    step = ctx.value("step_time_ms") or 0.0
    return 100.0 * lost_ms / step if step else 0.0


def evidence(ctx: Context, pairs: list[tuple[str, str]]) -> list[Evidence]:
    """Evidence for each (label, metric name) present in the context; absent metrics are skipped."""
    return [ctx.evidence(label, name) for label, name in pairs if name in ctx.metrics]


def finding(ctx: Context, *, id: str, title: str, category: str, pairs: list[tuple[str, str]],
            explanation: str, suggestions: list[str], lost_ms: float,
            extra: list[Evidence] | None = None) -> Finding:
    lost_ms = max(0.0, float(lost_ms))
    pct = lost_pct(ctx, lost_ms)
    return Finding(id=id, title=title, category=category, severity=severity_for(pct),
                   evidence=evidence(ctx, pairs) + list(extra or []), explanation=explanation,
                   suggestions=suggestions, time_lost_ms=lost_ms, time_lost_pct=pct)


def not_measured(*, id: str, title: str, category: str, explanation: str) -> Finding:
    """A family that needs hardware counters says what it could not see and how to get it."""
    return Finding(id=id, title=title, category=category, severity="LOW", evidence=[],
                   explanation=explanation,
                   suggestions=[("Run `hybrid run --mode hybrid ...` so the ncu pass collects hardware counters "
                                "(needs ncu and permission to read GPU counters: NVreg_RestrictProfilingToAdminUsers=0 "
                                "or root).")],
                   not_measured=True)


def has_counters(ctx: Context) -> bool:
    return not ctx.profile.counters.empty
