"""Host-bound eager dispatch: many tiny kernels the host cannot launch fast enough, and the longer host
gaps of the same dispatch (autograd's backward, the optimizer step) in a step dominated by launches."""

from __future__ import annotations

from hybrid.analysis.fusion import unmeasured_fusion_premise
from hybrid.provenance import ESTIMATED
from hybrid.rules.advice import (
    LAUNCHES_PER_CLIPPED_GRADIENT,
    RunConfig,
    Suggestion,
    capture_whole_step,
    foreach_clipping,
    fused_optimizer,
    use_compile,
    use_cuda_graphs,
)
from hybrid.rules.base import Context, Evidence, Fix, FixInputs, Inputs, Report, Rule
from hybrid.rules.common import batch_row_loop
from hybrid.rules.switches import COMPILE_ACROSS_SYNCS, COMPILE_REDUCE_OVERHEAD

# Half the kernels under 20 us (SMALL_KERNEL_NS in metrics) is the launch-bound signature.
SMALL_KERNEL_SHARE_PCT = 50.0
MIN_LOST_PCT = 5.0
# Gradient clipping one by one leads the advice where its launches are this share of the step's kernels.
CLIPPING_FIRST_SHARE = 0.1
# Memory below half of capacity leaves room to at least double the batch.
BATCH_HEADROOM_PEAK_PCT = 50.0
# The per-step host costs a larger batch would amortize: launch gaps and host work while the device idles.
HOST_GAPS = ("launch_gap", "host_after_sync", "host_other", "cpu_heavy_op")
# A launch-bound step whose short launch gaps outweigh its longer host gaps is dispatching, not running
# the script's own host work: the longer gaps are the same per-op dispatch (autograd between layers, the
# optimizer's per-parameter kernels). In the committed eager training captures the launch gaps lead
# (resnet50 10.2 vs 3.0 ms a step, ViT-S 8.6 vs 6.3, HF Trainer bf16 7.8 vs 5.0, and the nsys Python samples
# put the long gaps in loss.backward() and optimizer.step()); every planted script that does host work in
# its loop has far more long gaps than launch gaps (numpy augment 12.8 vs 0.0, .item() per micro-step 5.4
# vs 2.2, graph break 3.6 vs 1.8), and keeps them for cpu.preprocessing.
DISPATCH_POOL = ("launch_gap", "host_other")
# The findings that own the host gaps, by the pools they draw (launch.dispatch takes the dispatch gaps,
# cpu.preprocessing the host work, cpu.heavy_ops the CPU-heavy operators): a larger batch is a lever of
# its own only when it saves more than the largest of them.
HOST_GAP_OWNERS = (("launch_gap", "host_other"), ("host_after_sync", "host_other"), ("cpu_heavy_op",))


def launch_bound_lost_ms(idle_launch_ms: float) -> float:
    """Idle time between tiny kernels while the host was launching: what CUDA graphs remove."""
    return max(0.0, idle_launch_ms)


def dispatch_gaps_ms(launch_gap_ms: float, host_other_ms: float) -> float:
    """The longer host gaps counted as dispatch: all of them when the launch gaps outweigh them, else
    none (they are the script's own host work, cpu.preprocessing's)."""
    return host_other_ms if launch_gap_ms >= host_other_ms > 0 else 0.0


def batch_headroom_lost_ms(host_gaps_ms: float) -> float:
    """Per-step fixed host costs are paid once per batch: doubling the batch halves them per sample, so the
    samples of one step today would take half the step's host gaps less."""
    return 0.5 * max(0.0, host_gaps_ms)


def _host_gaps_ms(pools) -> float:
    return sum(max(0.0, pools.get(cause, 0.0)) for cause in HOST_GAPS)


def headroom_note(ctx: Context) -> list[Evidence]:
    """The larger-batch lever as evidence on the launch-bound finding: peak memory, and what a doubled
    batch would save per sample (the fixed host costs halved)."""
    peak = ctx.value("peak_memory_pct")
    if peak is None or peak >= BATCH_HEADROOM_PEAK_PCT:
        return []
    # Not "per sample": a figure per sample would divide by the batch (a BERT loop's 60 ms read as one
    # sample's, over 20 times the 2.9 ms a sample took).
    label = (
        "a doubled batch would save per step's worth of samples (half the profiled step's host gaps, "
        "fixed host costs assumed, not measured at that batch)"
    )
    return [
        ctx.evidence("peak memory of capacity", "peak_memory_pct"),
        Evidence(label, batch_headroom_lost_ms(_host_gaps_ms(ctx.pools)), "ms", ESTIMATED),
    ]


def framework_ops(ctx: Context) -> str:
    """The framework's host-only operators with their calls and host ms a step (hybrid.analysis.
    host_dispatch), as a clause; '' where the torch pass saw none."""
    parts = []
    if ctx.value("dispatch_autograd_ops"):
        parts.append(f"autograd's backward runs {ctx.value('dispatch_autograd_ops')}")
    if ctx.value("dispatch_optimizer_ops"):
        parts.append(f"{ctx.value('dispatch_optimizer_range')} runs {ctx.value('dispatch_optimizer_ops')}")
    return f"; on the host without launching, {' and '.join(parts)}" if parts else ""


def launch_advice(ctx: Context, idle_ms: float, dispatch: float) -> list[Suggestion]:
    share, kernels = ctx.value("small_kernel_share_pct", 0.0), ctx.value("kernels_per_step", 0.0)
    condition = (
        f"{share:.0f}% of {kernels:.0f} kernels a step run under 20 µs and the GPU idles "
        f"{idle_ms:.3g} ms a step while the host dispatches them"
        + (f" ({dispatch:.3g} ms of it in gaps over 0.1 ms)" if dispatch else "")
    )
    heavy = ctx.value("cpu_heavy_ops", 0) >= 1
    ops = tuple(str(ctx.value("cpu_heavy_op_names") or "").split(", ")) if heavy else ()
    # Clipping gradients one by one is the script's own line, and graphs of the model leave it eager: first
    # where its launches are a tenth of the step's (compiled MLP, foreach=False: 76 of 262 kernels).
    clipping = foreach_clipping(ctx.config, condition=condition)
    clipped = LAUNCHES_PER_CLIPPED_GRADIENT * (ctx.config.gradients_clipped_one_by_one or 0)
    first = clipping if kernels and clipped >= CLIPPING_FIRST_SHARE * kernels else []
    # A loop over a tensor's rows launches its kernels once per row: batching it is the script's own edit,
    # which graphs of the model leave in place (the per-sample loss's compiled model read 11.4 ms slower).
    first = batch_row_loop(ctx, condition=condition) + first
    out = first + use_cuda_graphs(ctx.config, condition=condition, applies_to=ops)
    # The longer gaps' host-only framework work stays eager in a compiled model's graphs; one graph of the
    # whole step replays it (resnet50: AccumulateGrad x161, 1.42 ms a step).
    framework = framework_ops(ctx) if dispatch else ""
    if framework:
        out += capture_whole_step(ctx.config, condition=condition + framework)
    if ctx.config.cuda_graphs:
        out.append(
            Suggestion(
                "Find the dispatch left outside the CUDA graphs: TORCH_LOGS=graph_breaks,cudagraphs "
                "names the graph breaks and the regions cudagraphs skipped; the optimizer step and "
                "gradient clipping run eager unless the step function itself is compiled (or captured "
                "with torch.cuda.graph and an optimizer built with capturable=True)",
                f"{condition}{framework}; CUDA graphs are already on",
                ops,
                locates_code=True,
            )
        )
    no_graphs = ctx.config.graphs_stop_at_syncs
    out += use_compile(
        ctx.config,
        why="fuse the small ops into fewer kernels",
        condition=condition + (f"; {no_graphs}" if no_graphs else ""),
        applies_to=ops,
    )
    out += fused_optimizer(
        ctx.config, condition=condition + "; an unfused optimizer step launches kernels per parameter group"
    )
    if not first:
        out += clipping
    peak = ctx.value("peak_memory_pct")
    if peak is not None and peak < BATCH_HEADROOM_PEAK_PCT:
        out.append(
            Suggestion(
                _larger_batch(ctx.config, "so each kernel does more work per launch"),
                f"{condition}; peak memory is {peak:.0f}% of the GPU's, so a doubled batch fits and "
                f"would save about {batch_headroom_lost_ms(_host_gaps_ms(ctx.pools)):.3g} ms per "
                f"{_step_samples(ctx)} (half the profiled step's host gaps, estimated)",
            )
        )
    return out


def _step_samples(ctx: Context) -> str:
    batch = ctx.value("batch_size")
    return f"{batch:.0f} samples (one step's today)" if batch else "step's worth of samples"


def _larger_batch(config: RunConfig, purpose: str, *, doubled: bool = False) -> str:
    """A larger batch in the run's own terms: the Trainer's argument, more prompts per generate() call,
    and the learning rate and gradient accumulation only where the run trains (an optimizer was recorded,
    or nothing was)."""
    if config.framework == "transformers":
        return f"TrainingArguments(per_device_train_batch_size=2x) {purpose}"
    if config.stepped_call == "generate":
        return f"Batch more prompts into each generate() call {purpose}"
    size = "Double the batch size" if doubled else "Increase the batch size"
    if config.optimizers == []:
        return f"{size} {purpose}"
    text = f"{size} {purpose} (scale the learning rate accordingly)"
    return text + (
        "; if the batch is fixed, keep the effective batch with gradient accumulation" if doubled else ""
    )


def dispatch_model(inp: Inputs) -> float | None:
    """Host-bound dispatch: the launch gaps and the longer host gaps, when the launch gaps outweigh them."""
    if inp["small_kernel_share_pct"] < SMALL_KERNEL_SHARE_PCT:
        return None
    host_other = max(0.0, inp.pools.get("host_other", 0.0))
    launch_left = max(0.0, (inp.pool_ms or 0.0) - host_other)
    dispatch = dispatch_gaps_ms(launch_left, host_other)
    return launch_bound_lost_ms(launch_left) + dispatch if dispatch else None


def launch_bound_model(inp: Inputs) -> float | None:
    if inp["small_kernel_share_pct"] < SMALL_KERNEL_SHARE_PCT:
        return None
    return launch_bound_lost_ms(inp.pool_ms)


def _across_syncs_premise(ctx: Context) -> str:
    """What the saving of the default compile across data-dependent syncs (launch_bound_fix) rests on: its
    compiled regions run at no host cost of their own, where each graph between the syncs pays its guards and
    wrapper (the torchvision detector on an H100: 7.47 ms replayed, 4.89 ms realized, settled;
    benchmarks/results/s24_h100), and the fusion premise where the runs hold kinds no verified run
    measured."""
    fusion = unmeasured_fusion_premise(
        ctx.value("fusible_chain_measured_pct"), ctx.value("fusible_chain_unmeasured_kinds")
    )
    return "the compiled graphs between the syncs add no host time of their own" + (
        f"; {fusion}" if fusion else ""
    )


def _launch_report(ctx: Context, lost_ms: float, dispatch_ms: float) -> Report:
    pairs = [
        ("kernels per step", "kernels_per_step"),
        ("kernels under 20 µs", "small_kernel_share_pct"),
        ("mean kernel", "mean_kernel_us"),
        ("GPU idle between launches", "idle_launch_gap_ms"),
        ("launch API time", "launch_api_ms"),
        ("launch rate", "launch_rate_per_s"),
    ]
    if dispatch_ms:
        pairs += [
            ("GPU idle in longer dispatch gaps (over 0.1 ms)", "idle_host_other_ms"),
            ("host-only autograd backward nodes", "dispatch_autograd_ms"),
            ("host-only ops in the optimizer's range", "dispatch_optimizer_ms"),
        ]
    extra = (
        [ctx.evidence("ops with CPU:GPU > 10:1", "cpu_heavy_op_names")]
        if ctx.value("cpu_heavy_ops", 0) >= 1
        else []
    ) + headroom_note(ctx)
    return Report(
        title=(
            "Host-bound dispatch: the GPU waits while eager PyTorch launches small kernels one by one"
            if dispatch_ms
            else "Launch-bound: kernels are too small to hide launch overhead"
        ),
        pairs=pairs,
        extra=extra,
        assumes=_across_syncs_premise(ctx) if ctx.value("data_dependent_sync_ops") else None,
        explanation=(
            "Most kernels finish faster than the host can issue the next one (eager PyTorch spends "
            "roughly 5-20 µs of host time per op), so the GPU idles between them. "
            + (
                "The longer host gaps of this step (over 0.1 ms) are counted here too: its launch "
                "gaps outweigh them, the signature of the same dispatch (autograd's backward, the "
                "optimizer's per-parameter kernels), not of the script's own host work. "
                if dispatch_ms
                else ""
            )
            + "Host-heavy ops, when listed, are where that host time goes; this finding owns the "
            "idle gaps they cause. A larger batch, when memory allows one, is a note here: it "
            "amortizes the same per-step costs."
        ),
        suggestions=launch_advice(ctx, lost_ms, dispatch_ms),
    )


def dispatch_report(ctx: Context, lost_ms: float) -> Report:
    return _launch_report(ctx, lost_ms, max(0.0, ctx.pools.get("host_other", 0.0)))


def launch_bound_report(ctx: Context, lost_ms: float) -> Report:
    return _launch_report(ctx, lost_ms, 0.0)


def batch_headroom_model(inp: Inputs) -> float | None:
    """Ranked on its own only when the larger batch saves more than any finding that owns the host gaps
    (else it is a note on the launch-bound finding)."""
    if inp["peak_memory_pct"] >= BATCH_HEADROOM_PEAK_PCT:
        return None
    lost = batch_headroom_lost_ms(inp.pool_ms)
    owned = max(sum(max(0.0, inp.pools.get(cause, 0.0)) for cause in causes) for causes in HOST_GAP_OWNERS)
    return lost if lost > owned else None


def batch_headroom_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Memory allows a larger batch to amortize per-step overhead",
        pairs=[
            ("peak memory of capacity", "peak_memory_pct"),
            ("batch size", "batch_size"),
            ("GPU utilization", "gpu_util_pct"),
            ("GPU idle between launches", "idle_launch_gap_ms"),
        ],
        assumes="per-step host costs stay the same when the batch doubles (not measured at a larger batch)",
        explanation=(
            "The step leaves the GPU idle for fixed host costs spread over several causes while "
            "using under half of its memory; a larger batch spreads all of them over more samples "
            "(time lost: what the samples of one step today would save at a doubled batch, estimated), "
            "more than fixing any one of "
            "them would. It is another remedy for the host gaps the findings it is an alternative "
            "to explain, not time added to theirs."
        ),
        suggestions=[
            Suggestion(
                _larger_batch(ctx.config, "and re-measure", doubled=True),
                f"peak memory is {ctx.value('peak_memory_pct', 0.0):.0f}% of the GPU's and the GPU idles "
                f"{_host_gaps_ms(ctx.pools):.3g} ms a step on fixed host costs",
            )
        ],
    )


# The idle causes in which the host worked without launching (the replay's long host gaps).
HOST_WORK_CAUSES = (
    "compiled_region_break",
    "dataloader_fetch",
    "host_after_sync",
    "cpu_heavy_op",
    "host_other",
)


def launch_bound_fix(inputs: FixInputs) -> Fix:
    """CUDA graphs remove the launch calls and their gaps; a captured step also loses the longer dispatch
    gaps this finding claims, as the same share of the step's long host gaps. Where the step syncs on
    data-dependent shapes no graph is captured, and the advice is the default compile: its fusion of the
    memory-bound kernels (hybrid.analysis.fusion) is what is replayed (beside a fusion finding, which
    replays the same, the replay keeps one saving: hybrid.replay.predict)."""
    syncs = inputs.metrics.get("data_dependent_sync_ops")
    if syncs:
        return Fix(
            "fused_kernels",
            "torch.compile (default mode: memory-bound kernels fused, no CUDA graphs)",
            {},
            f"the step's measured runs of fusible kernels; no CUDA graph is captured across its syncs on "
            f"data-dependent shapes ({syncs})",
        )
    launch = inputs.number("idle_launch_gap_ms") or 0.0
    host_work = sum(inputs.number(f"idle_{cause}_ms") or 0.0 for cause in HOST_WORK_CAUSES)
    dispatch = max(0.0, inputs.lost_ms - launch)
    share = min(1.0, dispatch / host_work) if host_work and dispatch else 0.0
    params = {"host_work_share": share} if share else {}
    basis = "the step's measured launch calls and dispatch gaps" + (
        f", and {share:.0%} of its host work in gaps over 0.1 ms (the longer dispatch gaps)" if share else ""
    )
    return Fix("graph_launch", 'CUDA graphs (torch.compile mode="reduce-overhead")', params, basis)


RULES = [
    # The dispatch finding first: when it holds it takes the launch gaps, and launch.bound finds none left.
    Rule(
        "launch.dispatch",
        "KERNEL_LAUNCH",
        ("small_kernel_share_pct", "step_time_ms"),
        dispatch_model,
        dispatch_report,
        optional=("peak_memory_pct",),
        pool=DISPATCH_POOL,
        floor_pct=MIN_LOST_PCT,
        fix=launch_bound_fix,
        switches=(COMPILE_REDUCE_OVERHEAD, COMPILE_ACROSS_SYNCS),
    ),
    Rule(
        "launch.bound",
        "KERNEL_LAUNCH",
        ("small_kernel_share_pct", "step_time_ms"),
        launch_bound_model,
        launch_bound_report,
        optional=("peak_memory_pct",),
        pool=("launch_gap",),
        floor_pct=MIN_LOST_PCT,
        fix=launch_bound_fix,
        switches=(COMPILE_REDUCE_OVERHEAD, COMPILE_ACROSS_SYNCS),
    ),
    Rule(
        "batch.headroom",
        "KERNEL_LAUNCH",
        ("peak_memory_pct", "step_time_ms"),
        batch_headroom_model,
        batch_headroom_report,
        pool=HOST_GAPS,
        floor_pct=MIN_LOST_PCT,
        alternative=True,
    ),
]
