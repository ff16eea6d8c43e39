"""Launch-bound steps: many tiny kernels the host cannot launch fast enough."""

from __future__ import annotations

from hybrid.rules.advice import Suggestion, use_compile, use_cuda_graphs
from hybrid.rules.base import Context, Fix, FixInputs, Inputs, Report, Rule

# Half the kernels under 20 us (SMALL_KERNEL_NS in metrics) is the launch-bound signature.
SMALL_KERNEL_SHARE_PCT = 50.0
MIN_LOST_PCT = 5.0
# Memory below half of capacity leaves room to at least double the batch.
BATCH_HEADROOM_PEAK_PCT = 50.0
# The per-step host costs a larger batch would amortize: launch gaps and host work while the device idles.
HOST_GAPS = ("launch_gap", "host_after_sync", "host_other", "cpu_heavy_op")


def launch_bound_lost_ms(idle_launch_ms: float) -> float:
    """Idle time between tiny kernels while the host was launching: what CUDA graphs remove."""
    return max(0.0, idle_launch_ms)


def batch_headroom_lost_ms(host_gaps_ms: float) -> float:
    """Per-step fixed host costs are paid once per batch: doubling the batch halves them per sample."""
    return 0.5 * max(0.0, host_gaps_ms)


def launch_advice(ctx: Context, idle_ms: float) -> list[Suggestion]:
    condition = (f"{ctx.value('small_kernel_share_pct', 0.0):.0f}% of {ctx.value('kernels_per_step', 0.0):.0f} kernels a "
                 f"step run under 20 µs and the GPU idles {idle_ms:.3g} ms a step between launches")
    ops = tuple(str(ctx.value("cpu_heavy_op_names") or "").split(", ")) if ctx.value("cpu_heavy_ops", 0) >= 1 else ()
    out = use_cuda_graphs(ctx.config, condition=condition, applies_to=ops)
    out += use_compile(ctx.config, why="fuse the small ops into fewer kernels", condition=condition, applies_to=ops)
    out.append(Suggestion("Increase the batch size so each kernel does more work per launch", condition))
    return out


def launch_bound_model(inp: Inputs) -> float | None:
    if inp["small_kernel_share_pct"] < SMALL_KERNEL_SHARE_PCT:
        return None
    return launch_bound_lost_ms(inp.pool_ms)


def launch_bound_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Launch-bound: kernels are too small to hide launch overhead",
        pairs=[("kernels per step", "kernels_per_step"), ("kernels under 20 µs", "small_kernel_share_pct"),
               ("mean kernel", "mean_kernel_us"), ("GPU idle between launches", "idle_launch_gap_ms"),
               ("launch API time", "launch_api_ms"), ("launch rate", "launch_rate_per_s")],
        extra=([ctx.evidence("ops with CPU:GPU > 10:1", "cpu_heavy_op_names")]
               if ctx.value("cpu_heavy_ops", 0) >= 1 else []),
        explanation=("Most kernels finish faster than the host can issue the next one (eager PyTorch spends "
                     "roughly 5-20 µs of host time per op), so the GPU idles between them. Host-heavy ops, "
                     "when listed, are where that host time goes; this finding owns the idle gaps they cause."),
        suggestions=launch_advice(ctx, lost_ms))


def batch_headroom_model(inp: Inputs) -> float | None:
    if inp["peak_memory_pct"] >= BATCH_HEADROOM_PEAK_PCT:
        return None
    return batch_headroom_lost_ms(inp.pool_ms)


def batch_headroom_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Memory allows a larger batch to amortize per-step overhead",
        pairs=[("peak memory of capacity", "peak_memory_pct"), ("batch size", "batch_size"),
               ("GPU utilization", "gpu_util_pct"), ("GPU idle between launches", "idle_launch_gap_ms")],
        assumes="per-step host costs stay the same when the batch doubles (not measured at a larger batch)",
        explanation=("The step leaves the GPU idle for fixed host costs while using under half of its memory; a "
                     "larger batch spreads those costs over more samples (time lost is per-sample, estimated for "
                     "a doubled batch). It is another remedy for the host gaps the findings it is an alternative "
                     "to explain, not time added to theirs."),
        suggestions=[Suggestion(
            ("TrainingArguments(per_device_train_batch_size=2x) and re-measure" if ctx.config.framework == "transformers"
             else "Double the batch size (scale the learning rate accordingly) and re-measure; if the batch is "
                  "fixed, keep the effective batch with gradient accumulation"),
            f"peak memory is {ctx.value('peak_memory_pct', 0.0):.0f}% of the GPU's and the GPU idles "
            f"{sum(ctx.pools.get(c, 0.0) for c in HOST_GAPS):.3g} ms a step on fixed host costs")])


def launch_bound_fix(inputs: FixInputs) -> Fix:
    return Fix("graph_launch", "CUDA graphs (torch.compile mode=\"reduce-overhead\")", {},
               "the step's measured launch calls and dispatch gaps")


RULES = [
    Rule("launch.bound", "KERNEL_LAUNCH", ("small_kernel_share_pct", "step_time_ms"), launch_bound_model,
         launch_bound_report, pool=("launch_gap",), floor_pct=MIN_LOST_PCT, fix=launch_bound_fix),
    Rule("batch.headroom", "KERNEL_LAUNCH", ("peak_memory_pct", "step_time_ms"), batch_headroom_model,
         batch_headroom_report, pool=HOST_GAPS, floor_pct=MIN_LOST_PCT, alternative=True),
]
