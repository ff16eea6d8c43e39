"""Figures and advice shared by the rule families."""

from __future__ import annotations

from hybrid.numbers import NS_PER_MS, significant
from hybrid.rules.advice import Suggestion
from hybrid.rules.base import Context, Fix, FixInputs, NoFix

# Tuned library kernels reach about 80% of the roofline (cuBLAS large GEMMs ~70-80% of tensor peak,
# streaming kernels ~85-90% of DRAM bandwidth); estimates of what a fix recovers aim at that ceiling.
PRACTICAL_ROOFLINE_PCT = 80.0
# Operators that read a device value back to the host, waiting for it.
SCALAR_READ_OPS = ("aten::item", "aten::_local_scalar_dense")


def counters_advice(ctx: Context) -> list[Suggestion]:
    """How to get hardware counters, from how this run's ncu pass went: rerunning with --mode hybrid is
    advice only for a run whose ncu pass did not run."""
    status = ctx.pass_status.get("ncu")
    if status == "skipped":
        return [
            Suggestion(
                "Rerun with `--mode hybrid` to measure them anyway",
                "this run skipped the ncu pass: faster kernels could not save as much as its primary "
                "finding (results.json passes: ncu)",
            )
        ]
    if status == "ok":
        return [
            Suggestion(
                "Profile these kernels with ncu: raise --ncu-kernels, or read the rank ncu ran on "
                "(`hybrid report RUN_DIR --rank K`)",
                "the ncu pass ran but measured none of this step's kernels",
            )
        ]
    if status is not None:
        return [
            Suggestion(
                "Fix the ncu pass (its log is RUN_DIR/ncu/console.log; reading GPU counters needs "
                "NVreg_RestrictProfilingToAdminUsers=0 or root) and rerun",
                f"the ncu pass of this run ended {status}",
            )
        ]
    return [
        Suggestion(
            "Run `hybrid run --mode hybrid ...` so the ncu pass collects hardware counters (needs ncu and "
            "permission to read GPU counters: NVreg_RestrictProfilingToAdminUsers=0 or root)",
            "no ncu pass ran in this run",
        )
    ]


def rule_saving(inputs: FixInputs, kind: str, description: str, basis: str, none_reason: str) -> Fix | NoFix:
    """A fix that removes the rule's own closed-form saving per step: for causes the replay cannot
    rebuild from the timeline (a graph break's host time, a kernel made faster)."""
    if inputs.lost_ms <= 0:
        return NoFix(none_reason)
    return Fix(
        kind,
        description,
        {"saved_ns_per_step": inputs.lost_ms * NS_PER_MS},
        f"{basis}, {significant(inputs.lost_ms)} ms per step",
    )


def faster_kernels_fix(inputs: FixInputs) -> Fix | NoFix:
    """The kernel families' fix: the rule's kernel-time saving, spread over the step's kernels."""
    return rule_saving(
        inputs,
        "faster_kernels",
        "the rule's kernel-time saving, replayed",
        "kernel time saved: the rule's closed-form estimate",
        "no kernel time saved",
    )


def batch_row_loop(ctx: Context, *, condition: str) -> list[Suggestion]:
    """One batched call for a Python loop over the rows of a tensor (hybrid.analysis.row_loop), where the
    torch pass found one."""
    rows = ctx.value("row_loop_rows")
    if not rows:
        return []
    ops = str(ctx.value("row_loop_ops") or "")
    return [
        Suggestion(
            f"Batch the Python loop over the {rows:.0f} rows: run its ops once on the whole tensor (a "
            "batched forward, a loss with reduction='none' weighted after) instead of once per row",
            f"{condition}; each step indexes {ctx.value('row_loop_indexing')} {rows:.0f} times"
            + (f" and runs {ops}" if ops else "")
            + f", {ctx.value('row_loop_host_ms', 0.0):.3g} ms of host time a step",
            tuple(name.split(" ×")[0] for name in ops.split(", ") if name),
        )
    ]


def gc_collect_site(ctx: Context) -> tuple[str, float] | None:
    """The gc.collect() the script calls that took the most time, as (file:line, ms a step); None where
    the collector was not located (hybrid.analysis.metrics._gc)."""
    site, ms = ctx.value("gc_collect_site"), ctx.value("gc_collect_site_ms_per_step")
    return None if site is None or ms is None else (str(site), float(ms))
