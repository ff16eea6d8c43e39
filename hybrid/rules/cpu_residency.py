"""Work that stays on (or goes back to) the CPU: heavy host ops, ping-pong transfers, host
preprocessing while the GPU waits, tensors created on the CPU and moved later."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hybrid.analysis.op_ranges import CREATE_OPS, MOVE_OPS
from hybrid.numbers import significant
from hybrid.rules.advice import (
    Suggestion,
    capture_whole_step,
    freeze_gc,
    fused_optimizer,
    host_batch_work,
    loader_workers,
    remove_graph_breaks,
    same_inputs_every_step,
    use_compile,
    use_cuda_graphs,
)
from hybrid.rules.base import Context, CopyFilter, Fix, FixInputs, Inputs, NoFix, Report, Rule
from hybrid.rules.common import SCALAR_READ_OPS, batch_row_loop, gc_collect_site

MIN_LOST_PCT = 1.0
# The host-only operators' time is the framework's own dispatch when autograd's backward nodes and the
# optimizer's ranges hold most of it (hybrid.analysis.host_dispatch). On the committed captures the share is
# 85-97% where the host time is dispatch (resnet50 1.50 of 1.54 ms a step, a compiled model with graph
# breaks 1.41 of 1.45, simple_cnn 0.17 of 0.21), 36-40% where the script reads values or copies its batch
# on the host (.item() per micro-step 0.77 of 2.17, pipelined input 0.19 of 0.48) and 0.7-2% where it
# computes there (numpy augmentation 0.13 of 5.80, pageable copies 0.10 of 12.5, made on host 0.18 of 26.3).
FRAMEWORK_SHARE = 0.5
# ... and when it is more than a sliver of the host work the GPU waits for (the ledger's idle host_other
# and host_after_sync): host-only operators are not all of the host's work. The H100 capture of
# benchmarks/planted/sync_cuda_synchronize.py held 0.39 ms of autograd nodes, 67% of its host-only
# operators, against 5.1 ms of idle host work a step, 8%: the rest was numpy sampling, no operator. Where
# the host time is dispatch it is 16% (simple_cnn, whose other host time is nn.Module calls between
# launches: 0.17 of 1.10 ms), 39% (a compiled model with graph breaks) and up to 172% (resnet50).
FRAMEWORK_SHARE_OF_IDLE_HOST = 0.1
# autograd's node for the backward of one torch.compile'd graph.
COMPILED_BACKWARD_NODE = "CompiledFunctionBackward"
# A training step normally moves one batch in and a few scalars out; ten or more copies per step
# means tensors go back and forth between host and device.
EXCESSIVE_COPIES_PER_STEP = 10
# Copies a well-structured step needs (one input batch in, one result out).
EXPECTED_COPIES_PER_STEP = 2
# A DataLoader fetch that takes this share of the host gap is a cause worth its own advice (workers).
LOADER_SHARE_OF_HOST_GAP = 0.25
# Where the steps with new input shapes add this share of the host gap, padding the inputs leads its advice.
NEW_SHAPES_SHARE = 0.25
# Host compute with no launch that leaves the GPU idle for 5% of the step is worth moving.
HOST_GAP_MIN_PCT = 5.0
# Host work while the device idles, outside syncs, DataLoader fetches, compiled regions, launch gaps and
# CPU-heavy ops (those have their own causes): what follows a sync first (what the sync finding left of it).
HOST_WORK_POOL = ("host_after_sync", "host_other")
# The ledger's idle causes in which the host worked without launching: all but syncs and launch gaps.
HOST_IDLE_CAUSES = (
    "compiled_region_break",
    "dataloader_fetch",
    "host_after_sync",
    "cpu_heavy_op",
    "host_other",
)


def cpu_heavy_lost_ms(cpu_heavy_ms: float) -> float:
    """Host time of CPU-heavy ops only costs step time while the GPU has nothing queued: the ledger's
    idle time inside those ops (the pool) bounds it."""
    return max(0.0, cpu_heavy_ms)


def transfers_lost_ms(exposed_copy_ms: float, copies_per_step: float) -> float:
    """Batching copies down to the expected few keeps their bytes but drops per-copy overhead and the
    syncs between them: the excess share of the exposed copy time."""
    if copies_per_step <= EXPECTED_COPIES_PER_STEP:
        return 0.0
    return exposed_copy_ms * (1.0 - EXPECTED_COPIES_PER_STEP / copies_per_step)


def late_migration_lost_ms(htod_ms: float, htod_count: float, moved_per_step: float) -> float:
    """Creating those tensors on the GPU removes their host->device copies."""
    if htod_count <= 0:
        return 0.0
    return htod_ms * min(1.0, moved_per_step / htod_count)


def heavy_ops_advice(ctx: Context) -> list[Suggestion]:
    """A loop over a tensor's rows is batched where the torch pass found one (batch_row_loop). Otherwise the
    ops' host time is their own per-call dispatch, which compiling and CUDA graphs remove: on the committed
    captures the CPU-heavy ops run once a step in the training loops (a loss's backward node, the autograd
    seed's ones_like, gradient clipping's stack of norms) and 9-52 times a step inside the models' own layers
    (HF GPT-2's layer_norm x25, torchvision's box decoding's where x18), never in a loop of the script's own
    that batching could remove (tests/test_one_cause.py). CUDA graphs first: replayed, a graph's ops cost no
    dispatch at all, where fusing only makes them fewer."""
    ops = tuple(str(ctx.value("cpu_heavy_op_names") or "").split(", "))
    calls = ctx.value("cpu_heavy_op_calls")
    condition = (
        f"{ctx.value('cpu_heavy_ops', 0):.0f} ops spend over 10x their GPU time on the host "
        f"({ctx.value('cpu_heavy_ops_ms', 0.0):.3g} ms a step)" + (f": {calls}" if calls else "")
    )
    out = batch_row_loop(ctx, condition=condition)
    out += use_cuda_graphs(ctx.config, condition=condition, applies_to=ops)
    out += use_compile(ctx.config, why="fuse the small ops", condition=condition, applies_to=ops)
    return out


@dataclass(frozen=True)
class Dispatch:
    """The framework's own host-only work in the step (hybrid.analysis.host_dispatch): autograd's backward
    nodes and the ops of the optimizer's range, host ms a step and the ops by name with their figures."""

    autograd_ms: float
    autograd_ops: str
    optimizer_ms: float
    optimizer_ops: str
    optimizer_range: str

    @property
    def owners(self) -> str:
        named = (("autograd's backward", self.autograd_ms), ("the optimizer step", self.optimizer_ms))
        return " and ".join(name for name, ms in named if ms > 0)

    @property
    def ms(self) -> float:
        return self.autograd_ms + self.optimizer_ms


def framework_dispatch(ctx: Context) -> Dispatch | None:
    """The framework's dispatch when it holds most (FRAMEWORK_SHARE) of the host-only operators' time and
    more than a sliver (FRAMEWORK_SHARE_OF_IDLE_HOST) of the host work the GPU waits for, and the step
    brings in no data made on the host; None otherwise (the host time is the script's)."""
    autograd, optimizer = ctx.value("dispatch_autograd_ms", 0.0), ctx.value("dispatch_optimizer_ms", 0.0)
    host_only = ctx.value("cpu_only_ops_ms", 0.0)
    idle_host = ctx.value("idle_host_other_ms", 0.0) + ctx.value("idle_host_after_sync_ms", 0.0)
    if not host_only or autograd + optimizer < FRAMEWORK_SHARE * host_only or _made_on_host(ctx):
        return None
    if autograd + optimizer < FRAMEWORK_SHARE_OF_IDLE_HOST * idle_host:
        return None
    return Dispatch(
        autograd,
        str(ctx.value("dispatch_autograd_ops") or ""),
        optimizer,
        str(ctx.value("dispatch_optimizer_ops") or ""),
        str(ctx.value("dispatch_optimizer_range") or "the optimizer step"),
    )


def _made_on_host(ctx: Context) -> bool:
    """Data made on the host each step reaches the GPU: host->device copies of tensors created on the CPU in
    the step, or more copies in than a batch and its labels (a DataLoader's batch is no preprocessing in the
    loop body). A tensor created on the CPU that no copy follows (an optimizer's step count) brings none."""
    htod = ctx.value("htod_count", 0.0)
    return htod >= 1 and (bool(ctx.value("created_on_cpu_op_names")) or htod > EXPECTED_COPIES_PER_STEP)


def dispatch_advice(ctx: Context, condition: str, dispatch: Dispatch) -> list[Suggestion]:
    """What removes each owner's host work, the larger first, each naming its ops and host ms a step: the
    optimizer's bookkeeping goes with a fused optimizer; autograd's nodes with fewer graph pieces (a compiled
    model with graph breaks) or torch.compile (an eager one, whose backward's view nodes fold into the graph);
    all of it with CUDA graphs of the whole step, unless they are
    on (then what they leave out): graphs of the compiled model alone (mode='reduce-overhead') leave
    autograd's gradient accumulation and the optimizer eager (the compiled graph_breaks model still runs
    AccumulateGrad x32 a step)."""
    parts: list[tuple[float, list[Suggestion]]] = []
    if dispatch.optimizer_ms > 0:
        evidence = (
            f"{condition}; {dispatch.optimizer_range} runs {dispatch.optimizer_ops} on the host "
            f"({dispatch.optimizer_ms:.3g} ms a step): an unfused optimizer keeps its step counts on the CPU "
            "and dispatches per parameter"
        )
        parts.append((dispatch.optimizer_ms, fused_optimizer(ctx.config, condition=evidence)))
    if dispatch.autograd_ms > 0:
        evidence = (
            f"{condition}; autograd's backward runs {dispatch.autograd_ops} on the host "
            f"({dispatch.autograd_ms:.3g} ms a step), nodes that launch no GPU work"
        )
        found: list[Suggestion] = []
        breaks = ctx.value("graph_breaks", 0)
        if breaks and COMPILED_BACKWARD_NODE in dispatch.autograd_ops:
            # Each piece a graph break leaves is its own autograd node: graph_breaks runs 8 a step.
            found.append(
                replace(
                    remove_graph_breaks(
                        ctx.value("graph_break_reasons"),
                        ctx.value("graph_break_hints"),
                        f"{evidence}; torch.compile recorded {breaks:.0f} graph break(s), and each "
                        f"{COMPILED_BACKWARD_NODE} node is one piece's backward, so one graph runs one",
                    ),
                    applies_to=("autograd::engine::evaluate_function: " + COMPILED_BACKWARD_NODE,),
                )
            )
        # A compiled model's remaining nodes (AccumulateGrad per parameter) are left to the whole-step
        # capture below: compiled autograd, which traces them, made compiled_train_mlp slower on the H200
        # (6.54 -> 8.93-9.82 ms a step in 3 alternating runs, benchmarks/results/s8_h200/mlp_variants.txt).
        if not ctx.config.compiled:
            found += use_compile(
                ctx.config,
                why="fold the backward's view and transpose nodes into compiled graphs",
                condition=evidence,
            )
        parts.append((dispatch.autograd_ms, found))
    out = [s for _, found in sorted(parts, key=lambda part: -part[0]) for s in found]
    evidence = (
        f"{condition}; it is the framework's own dispatch: {dispatch.ms:.3g} ms a step of host-only "
        f"operators in {dispatch.owners}"
    )
    if ctx.config.cuda_graphs:
        out.append(
            Suggestion(
                "Capture what the CUDA graphs leave out: compile the whole step function (forward, backward, "
                "optimizer.step and gradient clipping), or capture it with torch.cuda.graph and an optimizer "
                "built with capturable=True; TORCH_LOGS=graph_breaks,cudagraphs names the regions cudagraphs "
                "skipped",
                f"{evidence}; CUDA graphs are already on",
            )
        )
    else:
        out += capture_whole_step(ctx.config, condition=evidence)
    return out


def preprocessing_advice(ctx: Context, lost_ms: float) -> list[Suggestion]:
    """Host work that feeds the GPU data (host->device copies of data made on the host each step) is
    preprocessing to move to the device or to workers; the framework's own per-op work (autograd, the
    optimizer) is dispatch, which fused optimizers, compilation and CUDA graphs remove; other Python between
    launches is to be found (a host profiler, or the finding's callsites) and taken off the critical path.
    Every case ends with a change to make, not only a way to look."""
    condition = f"the GPU waits {lost_ms:.3g} ms a step while the host runs code that launches nothing"
    dispatch = framework_dispatch(ctx)
    if dispatch is not None:
        out = dispatch_advice(ctx, condition, dispatch)
        if out:
            return out
    new_shapes_ms = host_time_of_new_shapes_ms(ctx)
    if new_shapes_ms >= NEW_SHAPES_SHARE * lost_ms:
        return [
            same_inputs_every_step(
                str(ctx.value("slow_step_extra_ops")),
                ctx.value("slow_step_new_shapes"),
                ctx.config,
                ctx.op_names,
                condition=f"{condition}, {new_shapes_ms:.3g} ms of it on the steps that ran new input shapes",
            ),
            *preprocessing_elsewhere(ctx, condition, lost_ms),
        ]
    return preprocessing_elsewhere(ctx, condition, lost_ms)


def host_time_of_new_shapes_ms(ctx: Context) -> float:
    """The host work without launches that the steps running input shapes no typical step ran add, as ms a
    step (hybrid.analysis.jitter: the slow steps' extra time in that cause, spread over all steps); 0 where
    the slow steps ran no new shapes. The HF course's BERT fine-tune, padding each batch to its longest
    sentence, spent 93 of its slow steps' 122 extra ms there, in cuDNN attention building a plan per new
    length: 22 of the 45.6 ms a step (H100, benchmarks/results/s24_h100)."""
    shapes = ctx.value("slow_step_new_shapes")
    extra_ms = ctx.value("slow_step_extra_ms", 0.0)
    if not shapes or shapes == "none" or not extra_ms:
        return 0.0
    grown_ms = ctx.value("slow_step_extra_host_other_ms", 0.0)
    return ctx.value("later_steps_mean_over_median_ms", 0.0) * grown_ms / extra_ms


def preprocessing_elsewhere(ctx: Context, condition: str, lost_ms: float) -> list[Suggestion]:
    """The host work's changes where it is neither the framework's dispatch nor per-shape work."""
    htod = ctx.value("htod_count", 0.0)
    created = str(ctx.value("created_on_cpu_op_names") or "")
    cpu_ops = tuple(part for part in str(ctx.value("cpu_only_op_names") or "").split(", ") if part)
    out = [
        Suggestion(
            "Find the host code first: py-spy record -o profile.svg -- python train.py (or "
            "torch.profiler with with_stack=True) shows which Python lines run while the GPU waits",
            condition,
            cpu_ops,
            locates_code=True,
        )
    ]
    out += freeze_gc(
        ctx.value("gc_ms_per_step"),
        ctx.value("gc_collections_per_step"),
        ctx.value("gc_longest_ms"),
        collect_site=gc_collect_site(ctx),
        host_ms=lost_ms,
        condition=condition,
    )
    fetch_ms = ctx.value("data_loader_ms") or 0.0
    if _made_on_host(ctx):
        feed = f"{condition}; {htod:.0f} host->device copies a step bring data made on the host" + (
            f" (created by {created})" if created else ""
        )
        out += host_batch_work(ctx.op_names, condition=feed)
        out += loader_workers(
            ctx.config, condition=feed + "; worker processes can prepare batches ahead of the GPU"
        )
    elif fetch_ms >= LOADER_SHARE_OF_HOST_GAP * lost_ms:
        out += loader_workers(
            ctx.config,
            condition=f"{condition}; {fetch_ms:.3g} ms of it is spent fetching "
            "batches from the DataLoader in the training process",
        )
    if not any(not s.locates_code for s in out):
        out.append(
            Suggestion(
                "Take that host work off the step's critical path: do what does not change per "
                "step once before the loop, and queue the step's GPU work before the host work it "
                "does not depend on (logging, metrics, bookkeeping), so the GPU computes while the "
                "host works",
                condition,
                cpu_ops,
            )
        )
    return out


def heavy_model(inp: Inputs) -> float | None:
    if inp["cpu_heavy_ops"] < 1:
        return None
    return cpu_heavy_lost_ms(inp["cpu_heavy_ops_ms"])


def heavy_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Operators spend far more time on the CPU than on the GPU",
        pairs=[
            ("ops with CPU:GPU > 10:1", "cpu_heavy_ops"),
            ("their CPU time per step", "cpu_heavy_ops_ms"),
            ("ops, calls and host time a step", "cpu_heavy_op_calls"),
            ("GPU idle", "gpu_idle_ms"),
        ],
        explanation=(
            "These operators launch GPU work but spend over ten times as long on the host (Python, "
            "dispatch, argument checking, small tensor ops), so the GPU waits for them; the time lost is "
            "the GPU idle time inside their calls."
        ),
        suggestions=heavy_ops_advice(ctx),
    )


def transfers_model(inp: Inputs) -> float | None:
    copies = inp["htod_count"] + inp["dtoh_count"]
    if copies < EXCESSIVE_COPIES_PER_STEP:
        return None
    return transfers_lost_ms(inp["exposed_copy_ms"], copies)


def transfers_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Tensors move between host and device many times per step",
        pairs=[
            ("host->device copies per step", "htod_count"),
            ("device->host copies per step", "dtoh_count"),
            ("exposed copy time", "exposed_copy_ms"),
            ("syncs per step", "sync_count"),
        ],
        explanation=(
            "Each copy costs a launch, often a synchronization, and its transfer time; tensors that go "
            "back and forth (to numpy and back, .cpu() for a check) pay this every step."
        ),
        suggestions=[
            Suggestion(
                "Keep the computation on the GPU end to end: do on the device what is done on a copy "
                "on the host; concatenate small tensors and copy them once, read results back once "
                "per N steps",
                f"{ctx.value('htod_count', 0.0):.0f} host->device and {ctx.value('dtoh_count', 0.0):.0f} "
                "device->host copies a step",
            )
        ],
    )


def preprocessing_model(inp: Inputs) -> float | None:
    return inp.pool_ms


def preprocessing_report(ctx: Context, lost_ms: float) -> Report:
    dispatch = framework_dispatch(ctx)
    pairs = [
        ("GPU idle, other host work", "idle_host_other_ms"),
        ("GPU idle while the host worked after a sync", "idle_host_after_sync_ms"),
        ("besides, GPU idle in DataLoader fetches (not counted here)", "data_loader_idle_ms"),
        ("CPU-only top-level ops", "cpu_only_ops_ms"),
        ("of which autograd's backward nodes", "dispatch_autograd_ms"),
        ("of which in the optimizer's range", "dispatch_optimizer_ms"),
        ("Python GC time a step", "gc_ms_per_step"),
        ("GPU utilization", "gpu_util_pct"),
    ]
    explanation = (
        "Inside the step the device sat idle while the host neither launched kernels nor waited on "
        "the GPU: Python or data preparation on the main thread, in the loop body. "
        "Time spent inside a DataLoader's __next__, in torch.compile'd regions or in CPU-heavy "
        "operators is not counted here (they have their own findings)."
    )
    title = "The GPU waits while the host computes without launching work"
    if dispatch is not None:
        title = f"The GPU waits while the framework's own dispatch ({dispatch.owners}) runs on the host"
        share = dispatch.ms / ctx.value("cpu_only_ops_ms")
        explanation = (
            "Inside the step the device sat idle while the host neither launched kernels nor waited on "
            f"the GPU, and {share:.0%} of the host-only operators' time was the framework's own work, not "
            "the script's: autograd's engine running backward nodes that launch nothing (one gradient "
            "accumulation per parameter) and the optimizer's per-parameter bookkeeping on the host. "
            "Removing that dispatch (a fused optimizer, compiled autograd, CUDA graphs) gives the time back."
        )
    return Report(
        title=title, pairs=pairs, explanation=explanation, suggestions=preprocessing_advice(ctx, lost_ms)
    )


def preprocessing_fix(inputs: FixInputs) -> Fix | NoFix:
    idle = sum(inputs.number(f"idle_{cause}_ms") or 0.0 for cause in HOST_IDLE_CAUSES)
    if not idle:
        return NoFix("no host-only time measured")
    # The rule may leave part of that idle time to other findings (a sync, graph breaks): the same share of
    # the host work is what the fix (moving it to the GPU, capturing it) removes.
    share = min(1.0, inputs.lost_ms / idle)
    return Fix(
        "less_host_work",
        "the host work between launches removed",
        {"share": share},
        f"{share:.0%} of the step's measured host work between launches (gaps over 0.1 ms): "
        f"the rule's {significant(inputs.lost_ms)} of {significant(idle)} ms of host work "
        "with the GPU idle",
    )


def late_migration_model(inp: Inputs) -> float | None:
    moved = inp["created_on_cpu_then_moved"]
    # A measured step with no host->device copy moved nothing to the GPU: the op after the creation kept it
    # on the host (an optimizer's step count made by aten::empty then aten::to, in graph_breaks and
    # tc_fp16_unaligned).
    if moved <= 0 or inp["htod_count"] == 0:
        return None
    return late_migration_lost_ms(inp["htod_ms"] or 0.0, inp["htod_count"] or 0.0, moved)


def late_migration_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Tensors are created on the CPU and then moved to the GPU",
        pairs=[
            ("tensors created on CPU then moved, per step", "created_on_cpu_then_moved"),
            ("creating ops", "created_on_cpu_op_names"),
            ("host->device copy time", "htod_ms"),
        ],
        explanation=(
            "A tensor made on the host (torch.randn, torch.zeros, torch.tensor, from_numpy) and then "
            "sent with .to('cuda') costs host time and a copy each step; made on the device it costs "
            "neither."
        ),
        suggestions=[
            Suggestion(
                "Create it on the GPU: torch.randn(..., device='cuda'), torch.zeros(..., device=x.device); "
                "create constant tensors once outside the loop (or register_buffer)",
                f"{ctx.value('created_on_cpu_then_moved', 0.0):.0f} tensors a step are created on the host "
                "and then copied to the GPU",
                tuple(str(ctx.value("created_on_cpu_op_names") or "").split(", ")),
            )
        ],
    )


# Copies with no compute beside them are one pool (the ledger's `copy`): creating a tensor on the device
# removes its copy (late migration) before batching the rest (transfers); data_pipeline's pinning and
# overlap findings read what these leave.
LATE_MIGRATION = Rule(
    "cpu.late_migration",
    "CPU_RESIDENCY",
    ("created_on_cpu_then_moved", "step_time_ms"),
    late_migration_model,
    late_migration_report,
    optional=("htod_ms", "htod_count"),
    pool=("copy",),
    # As the other host-work rules: the committed captures' late migrations under 1% are 1.5-28 µs a step
    # (one tensor a step in cpu_roundtrip, Lightning, sentence-transformers, torchvision detection), ranked
    # beside findings of milliseconds; the planted one saves 2.2 ms of 44 (5%).
    floor_pct=MIN_LOST_PCT,
    copies=CopyFilter(kinds=("HtoD",)),
    callsite_ops=frozenset(CREATE_OPS),
)
TRANSFERS = Rule(
    "cpu.transfers",
    "CPU_RESIDENCY",
    ("htod_count", "dtoh_count", "exposed_copy_ms", "step_time_ms"),
    transfers_model,
    transfers_report,
    pool=("copy",),
    floor_pct=MIN_LOST_PCT,
    copies=CopyFilter(),
    callsite_ops=frozenset(MOVE_OPS) | frozenset(SCALAR_READ_OPS),
)
HEAVY_OPS = Rule(
    "cpu.heavy_ops",
    "CPU_RESIDENCY",
    ("cpu_heavy_ops", "cpu_heavy_ops_ms", "step_time_ms"),
    heavy_model,
    heavy_report,
    pool=("cpu_heavy_op",),
    floor_pct=MIN_LOST_PCT,
    callsite_ops=frozenset(),
)
PREPROCESSING = Rule(
    "cpu.preprocessing",
    "CPU_RESIDENCY",
    ("idle_host_other_ms", "step_time_ms"),
    preprocessing_model,
    preprocessing_report,
    pool=HOST_WORK_POOL,
    floor_pct=HOST_GAP_MIN_PCT,
    fix=preprocessing_fix,
)
RULES = [LATE_MIGRATION, TRANSFERS, HEAVY_OPS, PREPROCESSING]
