"""GPU-bound steps whose kernels run far below the roofline of this GPU."""

from __future__ import annotations

from hybrid.analysis.kernel_classes import kernel_label
from hybrid.provenance import MEASURED_NCU
from hybrid.rules.advice import Suggestion, enable_tf32, use_autocast, use_compile
from hybrid.rules.base import Context, Evidence, Inputs, Report, Rule
from hybrid.rules.common import PRACTICAL_ROOFLINE_PCT, faster_kernels_fix

# Only kernels below half of that practical ceiling are worth a finding.
LOW_EFFICIENCY_PCT = 40.0
# The step is GPU-bound when kernels fill at least half of it.
GPU_BOUND_KERNEL_PCT = 50.0
MIN_LOST_PCT = 5.0
# The kernels the specific causes (FP32 or misaligned GEMMs, small grids, uncoalesced loads, low
# occupancy, an idle tensor pipe) leave: those the counters place far below the roofline, and, without
# counters, those whose shortfall only the estimate from operator shapes sees (tc_fp16_unaligned:
# the narrow-alignment GEMMs were the low points; occ_few_row_softmax: a grid of a few blocks was the
# whole shortfall).
POOL = ("below_roofline", "kernel_unprofiled")


def roofline_lost_ms(kernel_ms: float, achieved_pct: float) -> float:
    """Kernel time beyond what the same work would take at the practical roofline."""
    if achieved_pct >= PRACTICAL_ROOFLINE_PCT or achieved_pct <= 0:
        return 0.0
    return kernel_ms * (1.0 - achieved_pct / PRACTICAL_ROOFLINE_PCT)


def _low_points(roof: dict, bound: str) -> tuple[str, ...]:
    """The largest placed points (kernels or ops) below half of the practical roofline that are `bound`
    ("compute" or "memory") on their own, by time."""
    low = [
        k
        for k in roof.get("kernels") or []
        if (k.get("achieved_pct_of_attainable") or 0) < LOW_EFFICIENCY_PCT and k.get("bound") == bound
    ]
    return tuple(
        kernel_label(str(k["name"])) for k in sorted(low, key=lambda k: -(k.get("time_ms") or 0))[:3]
    )


def roofline_advice(ctx: Context, roof: dict, achieved: float) -> list[Suggestion]:
    """Advice per kind of low point, whatever the step's overall bound: memory-bound kernels get fusion
    (unless compiled), 16-bit activations (unless autocast ran), channels_last for convs (unless on);
    compute-bound ones (GEMMs, convolutions) tensor cores for the FP32 GEMM time (unless TF32 is on) and
    larger GEMMs. GEMM advice is about GEMMs: a compute-bound step whose low points are batch-norm and
    pooling kernels gets the memory advice for those."""
    config = ctx.config
    condition = (
        f"the kernels reach {achieved:.0f}% of the roofline at their arithmetic intensity "
        f"({roof['bound']}-bound)"
    )
    memory_targets, compute_targets = _low_points(roof, "memory"), _low_points(roof, "compute")
    placed = bool(roof.get("kernels"))
    out: list[Suggestion] = []
    if memory_targets or (not placed and roof["bound"] == "memory"):
        memory = condition + (
            f"; the memory-bound kernels furthest below it: {', '.join(memory_targets)}"
            if memory_targets
            else ""
        )
        out += use_compile(
            config,
            why="fuse memory-bound ops so intermediates stay in registers and L2",
            condition=memory,
            applies_to=memory_targets,
        )
        out += use_autocast(
            config, condition=memory + "; 16-bit activations halve the bytes moved", applies_to=memory_targets
        )
        if ctx.value("conv_kernel_ms", 0.0) > 0 and config.channels_last is not True:
            state = (
                "the convolution weights are not channels_last"
                if config.channels_last is False
                else "the memory format was not recorded"
            )
            out.append(
                Suggestion(
                    "model.to(memory_format=torch.channels_last) and inputs likewise",
                    f"{memory}; convolutions ran and {state}",
                    memory_targets,
                )
            )
    if compute_targets or (not placed and roof["bound"] == "compute"):
        fp32_ms = ctx.value("gemm_fp32_ms", 0.0)
        if fp32_ms > 0:
            fp32 = f"{condition}; {fp32_ms:.3g} ms a step of FP32 GEMM kernels"
            out += enable_tf32(
                config,
                matmul=ctx.value("gemm_fp32_matmul_ms", 0.0) > 0,
                conv=ctx.value("gemm_fp32_conv_ms", 0.0) > 0,
                condition=fp32,
                applies_to=compute_targets,
            )
            out += use_autocast(config, condition=fp32, applies_to=compute_targets)
        if ctx.value("gemm_time_ms", 0.0) > 0:
            out.append(
                Suggestion(
                    "Grow GEMM sizes (batch, hidden dims multiple of 64) so tiles fill the GPU",
                    f"{condition}; GEMMs take {ctx.value('gemm_time_ms', 0.0):.3g} ms a step",
                    compute_targets,
                )
            )
    return out


def model(inp: Inputs) -> float | None:
    roof = inp.roofline
    achieved = roof.get("achieved_pct_of_attainable")
    kernel = inp["kernel_time_ms"]
    if (
        achieved is None
        or achieved >= LOW_EFFICIENCY_PCT
        or not inp.step_ms
        or 100 * kernel / inp.step_ms < GPU_BOUND_KERNEL_PCT
    ):
        return None
    # The kernels no specific cause took, at the step's efficiency. With counters, only those ncu placed
    # far below the roofline: its efficiency is not extrapolated to the kernels it did not replay.
    left = inp.pool_ms or 0.0
    base = min(left, inp.pools.get("below_roofline", 0.0)) if roof["source"] == MEASURED_NCU else left
    return roofline_lost_ms(base, achieved)


def report(ctx: Context, lost_ms: float) -> Report:
    roof = ctx.roofline
    achieved = roof["achieved_pct_of_attainable"]
    src = roof["source"]
    extra = [
        Evidence("bound", roof["bound"], "", src),
        Evidence("arithmetic intensity", roof["arithmetic_intensity"], "FLOP/B", src),
        Evidence("ridge point", roof["ridge_point"], "FLOP/B", "spec"),
        Evidence("achieved of attainable", achieved, "%", src),
    ]
    advice = roofline_advice(ctx, roof, achieved)
    return Report(
        title=f"Kernels run far below this GPU's {roof['bound']} roofline",
        pairs=[("kernel time per step", "kernel_time_ms")],
        extra=extra,
        # The fix is no transformation the replay can measure: it replays this closed form.
        assumes=f"a fix brings these kernels to ~{PRACTICAL_ROOFLINE_PCT:.0f}% of the roofline, as tuned "
        "library kernels reach (not measured for these kernels)",
        explanation=(
            f"The step is GPU-bound and its kernels, weighted by time, reach {achieved:.0f}% of what the "
            f"roofline allows at their arithmetic intensity; tuned kernels reach "
            f"~{PRACTICAL_ROOFLINE_PCT:.0f}%."
            + (
                " FLOPs and bytes are estimated from operator shapes (no hardware counters)."
                if src == "estimated"
                else ""
            )
        ),
        suggestions=advice,
    )


RULES = [
    Rule(
        "roofline.low_efficiency",
        "ROOFLINE",
        ("kernel_time_ms", "step_time_ms"),
        model,
        report,
        pool=POOL,
        floor_pct=MIN_LOST_PCT,
        fix=faster_kernels_fix,
    )
]
