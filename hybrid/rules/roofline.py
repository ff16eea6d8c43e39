"""GPU-bound steps whose kernels run far below the roofline of this GPU."""

from __future__ import annotations

from hybrid.provenance import MEASURED_NCU
from hybrid.rules.base import Context, Evidence, Finding, Rule
from hybrid.rules.common import PRACTICAL_ROOFLINE_PCT, claimed_ms, finding, lost_pct

# Only kernels below half of that practical ceiling are worth a finding.
LOW_EFFICIENCY_PCT = 40.0
# The step is GPU-bound when kernels fill at least half of it.
GPU_BOUND_KERNEL_PCT = 50.0
MIN_LOST_PCT = 5.0
# The specific reasons a kernel runs below the roofline. Each owns the part of the shortfall it
# explains; this generic finding keeps the rest (tc_fp16_unaligned: the narrow-alignment GEMMs were
# the low points; occ_few_row_softmax: a grid of a few blocks was the whole shortfall).
SPECIFIC_CAUSES = ("tensor.fp32_gemm", "tensor.misaligned_dims", "tensor.pipe", "occupancy.small_grid",
                   "occupancy.achieved", "memory.coalescing")


def roofline_lost_ms(kernel_ms: float, achieved_pct: float) -> float:
    """Kernel time beyond what the same work would take at the practical roofline."""
    if achieved_pct >= PRACTICAL_ROOFLINE_PCT or achieved_pct <= 0:
        return 0.0
    return kernel_ms * (1.0 - achieved_pct / PRACTICAL_ROOFLINE_PCT)


def check_low_efficiency(ctx: Context) -> Finding | None:
    roof = ctx.roofline
    achieved = roof.get("achieved_pct_of_attainable")
    step, kernel = ctx.value("step_time_ms", 0.0), ctx.value("kernel_time_ms", 0.0)
    if achieved is None or achieved >= LOW_EFFICIENCY_PCT or not step or 100 * kernel / step < GPU_BOUND_KERNEL_PCT:
        return None
    # Counters place only the kernels ncu replayed (roofline time_ms: their GPU time per step): their
    # efficiency is not extrapolated to the rest.
    placed_ms = roof["time_ms"] if roof["source"] == MEASURED_NCU else kernel
    lost = roofline_lost_ms(placed_ms, achieved) - claimed_ms(ctx, *SPECIFIC_CAUSES)
    if lost_pct(ctx, lost) < MIN_LOST_PCT:
        return None
    src = roof["source"]
    extra = [Evidence("bound", roof["bound"], "", src),
             Evidence("arithmetic intensity", roof["arithmetic_intensity"], "FLOP/B", src),
             Evidence("ridge point", roof["ridge_point"], "FLOP/B", "spec"),
             Evidence("achieved of attainable", achieved, "%", src)]
    if roof["bound"] == "memory":
        advice = ["Fuse memory-bound ops (torch.compile) so intermediates stay in registers/L2.",
                  "Use bf16/fp16 activations (torch.autocast) to halve the bytes moved.",
                  "Use channels_last for convolutions (model.to(memory_format=torch.channels_last))."]
    else:
        advice = ["Enable tensor cores for matmuls: torch.set_float32_matmul_precision('high') or autocast(bf16).",
                  "Grow GEMM sizes (batch, hidden dims multiple of 64) so tiles fill the GPU."]
    return finding(
        ctx, id="roofline.low_efficiency", title=f"Kernels run far below this GPU's {roof['bound']} roofline",
        category="ROOFLINE", pairs=[("kernel time per step", "kernel_time_ms")], extra=extra,
        explanation=(f"The step is GPU-bound and its kernels, weighted by time, reach {achieved:.0f}% of what the "
                     f"roofline allows at their arithmetic intensity; tuned kernels reach ~{PRACTICAL_ROOFLINE_PCT:.0f}%."
                     + (" FLOPs and bytes are estimated from operator shapes (no hardware counters)."
                        if src == "estimated" else "")),
        suggestions=advice, lost_ms=lost)


RULES = [Rule("roofline.low_efficiency", "ROOFLINE", ("kernel_time_ms", "step_time_ms"), check_low_efficiency)]
