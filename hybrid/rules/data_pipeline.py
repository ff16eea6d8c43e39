"""Getting data to the GPU: a DataLoader the GPU waits for, pageable copies, copies not overlapped
with compute, step jitter."""

from __future__ import annotations

from hybrid.rules.advice import Suggestion, loader_workers
from hybrid.rules.base import Context, Finding, Rule
from hybrid.rules.common import claimed_ms, finding, lost_pct, on_analyzed_clock

# Below 1% of the step a copy problem is not worth a finding.
MIN_LOST_PCT = 1.0
# A DataLoader stall is host idle time like host preprocessing in the loop body, so it is held to the
# same floor (cpu_residency.HOST_GAP_MIN_PCT): 5% of the step.
LOADER_STALL_MIN_PCT = 5.0
# torch.utils.data's iterator when num_workers=0: batches are built in the training process.
SINGLE_PROCESS_ITERATOR = "_SingleProcessDataLoaderIter"
# A steady training loop varies by a few % step to step; above 10% CV something intermittent
# (data loading, GC, recompiles) stalls some steps.
STEP_CV_PCT = 10.0
# Copy time with a more specific cause: tensors that should have been created on the device
# (cpu.late_migration) and copies that should be batched into a few (cpu.transfers).
COPY_OWNERS = ("cpu.late_migration", "cpu.transfers")


def pageable_copy_lost_ms(exposed_pageable_ms: float, pageable_bytes_per_s: float | None,
                          pinned_bytes_per_s: float | None) -> float:
    """What pinning saves on the copies that sit on the critical path: they would run at the pinned
    rate, so the exposed time shrinks by the ratio of the two bandwidths."""
    if not pageable_bytes_per_s or not pinned_bytes_per_s or pageable_bytes_per_s >= pinned_bytes_per_s:
        return 0.0
    return exposed_pageable_ms * (1.0 - pageable_bytes_per_s / pinned_bytes_per_s)


def exposed_copy_lost_ms(exposed_pinned_ms: float, kernel_ms: float) -> float:
    """A copy can hide behind compute on another stream, at most behind all of the step's kernels."""
    return max(0.0, min(exposed_pinned_ms, kernel_ms))


def loader_stall_lost_ms(data_loader_idle_ms: float, idle_host_ms: float | None) -> float:
    """Host time inside DataLoader.__next__ while the device ran nothing is host idle time: the host
    neither launched nor waited on the GPU. It was measured by the torch pass; when the timeline
    analyzed is another pass's (nsys), it cannot exceed that timeline's host idle time."""
    stall = max(0.0, data_loader_idle_ms)
    return stall if idle_host_ms is None else min(stall, max(0.0, idle_host_ms))


def jitter_lost_ms(mean_ms: float, median_ms: float) -> float:
    """Slow steps pull the mean above the typical step; that excess is what jitter costs."""
    return max(0.0, mean_ms - median_ms)


def check_loader_stall(ctx: Context) -> Finding | None:
    lost = loader_stall_lost_ms(on_analyzed_clock(ctx, ctx.value("data_loader_idle_ms", 0.0)), ctx.value("idle_host_ms"))
    if lost_pct(ctx, lost) < LOADER_STALL_MIN_PCT:
        return None
    in_process = ctx.value("data_loader_iterator") == SINGLE_PROCESS_ITERATOR
    condition = f"the GPU ran nothing for {lost:.3g} ms a step while the host fetched a batch"
    if in_process:
        cause = ("The DataLoader has num_workers=0: every batch is read, decoded, augmented and collated in "
                 "the training process, between steps, while the GPU waits.")
        advice = loader_workers(ctx.config, condition=condition + " in the training process (num_workers=0)")
    else:
        cause = ("The DataLoader's workers do not keep up: the training process waits in __next__ for the next "
                 "batch while the GPU has nothing to run.")
        advice = [Suggestion("Raise num_workers (up to the free CPU cores) and prefetch_factor; keep "
                             "persistent_workers=True", condition + " from worker processes that fall behind")]
    advice += [Suggestion("Make per-item work cheaper: decode and augment on the GPU (torchvision.transforms.v2 on CUDA "
                          "tensors, NVIDIA DALI), or store preprocessed data; measure the loader alone (iterate it "
                          "without the model) to see the batches per second it can deliver", condition)]
    return finding(
        ctx, id="data.loader_stall", title="The GPU waits for the DataLoader", category="DATA_PIPELINE",
        pairs=[("GPU idle while fetching a batch", "data_loader_idle_ms"),
               ("host time fetching a batch", "data_loader_ms"), ("DataLoader iterator", "data_loader_iterator"),
               ("GPU idle, host busy with no launch", "idle_host_ms"), ("GPU utilization", "gpu_util_pct")],
        explanation=(f"{cause} Time lost: host time inside DataLoader.__next__ (torch.profiler's "
                     "`enumerate(DataLoader)#...__next__` range) during which the device ran nothing."),
        suggestions=advice,
        lost_ms=lost)


def pageable_advice(ctx: Context) -> list[Suggestion]:
    condition = (f"{ctx.value('pageable_copies_per_step', 0.0):.0f} host<->device copies a step from pageable memory "
                 f"({ctx.value('pageable_copy_ms', 0.0):.3g} ms)")
    loaders = ctx.config.data_loaders
    out = []
    if ctx.config.framework == "transformers" and not ctx.config.hf("dataloader_pin_memory"):
        out.append(Suggestion("TrainingArguments(dataloader_pin_memory=True)", condition))
    elif loaders is None or any(not d.get("pin_memory") for d in loaders):
        state = "a DataLoader of this run has pin_memory=False" if loaders else "DataLoader settings were not recorded"
        out.append(Suggestion("DataLoader(..., pin_memory=True) and batch.to('cuda', non_blocking=True)",
                              f"{condition}; {state}"))
    out.append(Suggestion("For tensors built by hand: allocate once with torch.empty(..., pin_memory=True) and copy_ "
                          "into it, or call .pin_memory() before .to('cuda', non_blocking=True); keep tensors that "
                          "never change on the GPU", condition + ("; the DataLoaders already pin their batches"
                                                                  if loaders and all(d.get("pin_memory") for d in loaders)
                                                                  else "")))
    return out


def check_pageable(ctx: Context) -> Finding | None:
    pinned = ctx.peaks.get("pinned_copy_bytes_per_s")
    lost = (pageable_copy_lost_ms(ctx.value("exposed_pageable_copy_ms", 0.0), ctx.value("pageable_bytes_per_s"), pinned)
            - claimed_ms(ctx, *COPY_OWNERS))
    if ctx.value("pageable_copy_ms", 0.0) <= 0 or lost_pct(ctx, lost) < MIN_LOST_PCT:
        return None
    return finding(
        ctx, id="copy.pageable", title="Host<->device copies use pageable memory", category="DATA_PIPELINE",
        pairs=[("pageable copies per step", "pageable_copies_per_step"), ("pageable share of copied bytes",
                                                                          "pageable_copy_share_pct"),
               ("pageable copy time", "pageable_copy_ms"), ("pageable bandwidth", "pageable_bytes_per_s"),
               ("HtoD share of link peak", "htod_link_pct"), ("copy overlapped with compute",
                                                              "copy_compute_overlap_pct")],
        explanation=("Copies from pageable host memory are staged by the driver through a pinned bounce buffer: "
                     "they run at a fraction of the link's bandwidth, block the host for their whole duration "
                     "and cannot overlap with compute. Pinned memory copies at close to the link rate and, with "
                     "non_blocking=True, asynchronously. Time lost assumes the pinned rate of "
                     f"{(pinned or 0) / 1e9:.0f} GB/s (estimated: 80% of the link's peak)."),
        suggestions=pageable_advice(ctx),
        lost_ms=lost)


def check_exposed_copies(ctx: Context) -> Finding | None:
    exposed_pinned = ctx.value("exposed_copy_ms", 0.0) - ctx.value("exposed_pageable_copy_ms", 0.0)
    lost = exposed_copy_lost_ms(exposed_pinned, ctx.value("kernel_time_ms", 0.0)) - claimed_ms(ctx, *COPY_OWNERS)
    if lost_pct(ctx, lost) < MIN_LOST_PCT:
        return None
    return finding(
        ctx, id="copy.not_overlapped", title="Pinned copies do not overlap with compute", category="DATA_PIPELINE",
        pairs=[("copy overlapped with compute", "copy_compute_overlap_pct"), ("exposed copy time", "exposed_copy_ms"),
               ("host->device copies per step", "htod_count")],
        explanation=("Copies run while no kernel runs, so the step pays for them in full. Issued with "
                     "non_blocking=True (and, for prefetching, on a side stream) the next batch's copy runs "
                     "under this step's compute."),
        suggestions=[Suggestion("Use .to('cuda', non_blocking=True) on pinned tensors, and prefetch the next batch on a "
                                "separate torch.cuda.Stream while the current one computes",
                                f"{lost:.3g} ms a step of pinned copies run while no kernel runs")],
        lost_ms=lost)


def jitter_advice(ctx: Context) -> list[Suggestion]:
    condition = (f"step time varies by {ctx.value('step_time_cv_pct', 0.0):.0f}% (slowest: "
                 f"{ctx.value('slowest_step') or 'n/a'})")
    out = []
    if ctx.value("data_loader_ms", 0.0) > 0 or ctx.config.data_loaders:
        out += loader_workers(ctx.config, condition=condition + "; batches come from a DataLoader")
    if ctx.config.compiled or ctx.value("graph_breaks", 0):
        out.append(Suggestion("Check for recompiles with TORCH_LOGS=recompiles", condition + "; the model runs "
                              "compiled"))
    out.append(Suggestion("Move logging, evaluation and checkpointing off the hot steps or make them asynchronous; "
                          "gc.freeze() after setup if Python's garbage collector runs mid-step", condition))
    return out


def check_jitter(ctx: Context) -> Finding | None:
    if ctx.value("step_time_cv_pct", 0.0) < STEP_CV_PCT:
        return None
    lost = jitter_lost_ms(ctx.value("step_time_ms", 0.0), ctx.value("step_time_median_ms", 0.0))
    return finding(
        ctx, id="steps.jitter", title="Step time varies from step to step", category="DATA_PIPELINE",
        pairs=[("step time CV", "step_time_cv_pct"), ("mean step", "step_time_ms"),
               ("median step", "step_time_median_ms"), ("slowest step", "slowest_step"),
               ("outlier steps excluded", "steps_excluded")],
        explanation=("Some steps take much longer than others. Intermittent stalls usually come from the input "
                     "pipeline (a DataLoader worker falls behind), Python garbage collection, recompilation or "
                     "periodic logging/checkpointing."),
        suggestions=jitter_advice(ctx),
        lost_ms=lost)


RULES = [
    Rule("data.loader_stall", "DATA_PIPELINE", ("data_loader_idle_ms", "step_time_ms"), check_loader_stall),
    Rule("copy.pageable", "DATA_PIPELINE", ("pageable_copy_ms", "step_time_ms"), check_pageable),
    Rule("copy.not_overlapped", "DATA_PIPELINE", ("exposed_copy_ms", "step_time_ms"), check_exposed_copies),
    Rule("steps.jitter", "DATA_PIPELINE", ("step_time_cv_pct", "step_time_median_ms"), check_jitter),
]
