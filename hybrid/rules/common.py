"""Figures and advice shared by the rule families."""

from __future__ import annotations

from hybrid.rules.advice import Suggestion
from hybrid.rules.base import Context

# Tuned library kernels reach about 80% of the roofline (cuBLAS large GEMMs ~70-80% of tensor peak,
# streaming kernels ~85-90% of DRAM bandwidth); estimates of what a fix recovers aim at that ceiling.
PRACTICAL_ROOFLINE_PCT = 80.0


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
