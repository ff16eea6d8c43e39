"""Getting data to the GPU: a DataLoader the GPU waits for, pageable copies, copies not overlapped
with compute, step jitter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hybrid.analysis.op_ranges import COMPILED_REGION_PREFIX
from hybrid.host_cpus import MAX_LOADER_WORKERS, WAITING_CPU_PCT, loader_worker_count
from hybrid.ledger.causes import BUSY_ORDER
from hybrid.numbers import NS_PER_MS, significant
from hybrid.rules.advice import (
    Suggestion,
    batch_inputs,
    freeze_gc,
    loader_workers,
    same_inputs_every_step,
    use_cuda_graphs,
)
from hybrid.rules.base import Context, CopyFilter, Finding, Fix, FixInputs, Inputs, NoFix, Report, Rule
from hybrid.rules.common import gc_collect_site
from hybrid.rules.switches import LOADER_PIN_MEMORY, LOADER_WORKERS

# Below 1% of the step a copy problem is not worth a finding.
MIN_LOST_PCT = 1.0
# A DataLoader stall is host idle time like host preprocessing in the loop body, so it is held to the
# same floor (cpu_residency.HOST_GAP_MIN_PCT): 5% of the step.
LOADER_STALL_MIN_PCT = 5.0
# torch.utils.data's iterator when num_workers=0: batches are built in the training process.
SINGLE_PROCESS_ITERATOR = "_SingleProcessDataLoaderIter"
# The slow steps' extra time is other findings' where this share of it lies in the causes they claimed.
JITTER_THEIRS_SHARE = 0.5
# A steady training loop varies by a few % step to step; above 10% CV something intermittent
# (data loading, GC, recompiles) stalls some steps.
STEP_CV_PCT = 10.0
# The compiled function's calls: host time there that grows on some steps is Dynamo's guards and recompiles.
COMPILED_OP_MARKS = (COMPILED_REGION_PREFIX, "CompiledFunction")


def pageable_copy_lost_ms(
    exposed_pageable_ms: float, pageable_bytes_per_s: float | None, pinned_bytes_per_s: float | None
) -> float:
    """What pinning saves on the copies that sit on the critical path: they would run at the pinned
    rate, so the exposed time shrinks by the ratio of the two bandwidths."""
    if not pageable_bytes_per_s or not pinned_bytes_per_s or pageable_bytes_per_s >= pinned_bytes_per_s:
        return 0.0
    return exposed_pageable_ms * (1.0 - pageable_bytes_per_s / pinned_bytes_per_s)


def exposed_copy_lost_ms(exposed_pinned_ms: float, kernel_ms: float) -> float:
    """A copy can hide behind compute on another stream, at most behind all of the step's kernels."""
    return max(0.0, min(exposed_pinned_ms, kernel_ms))


def _workers_for_the_fetch(ctx: Context, condition: str, *, pin: bool = True) -> list[Suggestion]:
    """The DataLoader change for a loader that fetches in the training process: the workers the run's
    evidence gives it (advised_workers), why that many in the condition."""
    workers = advised_workers(ctx.value)
    return loader_workers(
        ctx.config,
        condition=condition + (f"; {workers.why}" if workers else ""),
        pin=pin,
        workers=workers.count if workers else None,
    )


def _workers_fall_behind(condition: str) -> Suggestion:
    return Suggestion(
        "Raise num_workers (up to the free CPU cores) and prefetch_factor; keep persistent_workers=True",
        condition + " from worker processes that fall behind",
    )


def loader_stall_model(inp: Inputs) -> float | None:
    """Device idle time inside DataLoader.__next__ (the torch pass's ranges, carried onto the analyzed
    timeline by the ledger): the host neither launched nor waited on the GPU."""
    return inp.pool_ms


def loader_stall_report(ctx: Context, lost_ms: float) -> Report:
    condition = f"the GPU ran nothing for {lost_ms:.3g} ms a step while the host fetched a batch"
    if ctx.value("data_loader_iterator") == SINGLE_PROCESS_ITERATOR:
        cause = (
            "The DataLoader has num_workers=0: every batch is read, decoded, augmented and collated in "
            "the training process, between steps, while the GPU waits."
        )
        advice = _workers_for_the_fetch(ctx, condition + " in the training process (num_workers=0)")
    else:
        cause = (
            "The DataLoader's workers do not keep up: the training process waits in __next__ for the next "
            "batch while the GPU has nothing to run."
        )
        advice = [_workers_fall_behind(condition)]
    advice += per_item_work(ctx, condition)
    return Report(
        title="The GPU waits for the DataLoader",
        pairs=[
            ("GPU idle while fetching a batch", "data_loader_idle_ms"),
            ("host time fetching a batch", "data_loader_ms"),
            ("DataLoader iterator", "data_loader_iterator"),
            ("GPU idle, other host work", "idle_host_other_ms"),
            ("GPU utilization", "gpu_util_pct"),
            ("CPU cores this process may use", "host_cpus"),
            ("share of the fetch the training thread ran on or waited for a CPU", "data_loader_cpu_pct"),
            ("cores the process kept busy", "host_cores_busy"),
        ],
        explanation=(
            f"{cause} Time lost: the device idle time inside DataLoader.__next__ (torch.profiler's "
            "`enumerate(DataLoader)#...__next__` range), placed on the analyzed timeline as the same share "
            "of its step."
        ),
        suggestions=advice,
    )


def per_item_work(ctx: Context, condition: str) -> list[Suggestion]:
    """Cheaper per-item work in the loader, for the input the model reads (hybrid.rules.advice.batch_inputs):
    tokenizing per batch or ahead for token ids, GPU transforms for images, preprocessed data for either."""
    inputs = batch_inputs(ctx.op_names)
    measure = (
        "; measure the loader alone (iterate it without the model) to see the batches per second it delivers"
    )
    out = []
    if "token ids" in inputs:
        ops = inputs["token ids"]
        out.append(
            Suggestion(
                "Make per-item work cheaper: store the dataset tokenized (datasets' map(tokenize, "
                "batched=True), saved once), or tokenize a whole batch in the collate_fn with the fast "
                "tokenizer instead of one text per __getitem__" + measure,
                f"{condition}; the model reads its input through {', '.join(ops)} (token ids)",
                ops,
            )
        )
    if "images" in inputs:
        ops = inputs["images"]
        out.append(
            Suggestion(
                "Make per-item work cheaper: decode and augment on the GPU (torchvision.transforms.v2 on "
                "CUDA tensors, NVIDIA DALI), or store preprocessed images" + measure,
                f"{condition}; the model reads its input through {', '.join(ops)} (images)",
                ops,
            )
        )
    return out or [
        Suggestion("Make per-item work cheaper: store the data preprocessed, once" + measure, condition)
    ]


@dataclass(frozen=True)
class Workers:
    """The DataLoader workers the advice gives a loader that fetches in the training process, and the step
    they leave: the longest of the rest of the step, a batch built in one of them (fetch/count), and the
    step's CPU work spread on the cores this process may use (the process's CPU time a step where measured,
    else the rest of the step and the fetch's CPU time). On 2 cores, batches of 16 items that each wait 10 ms
    (waiting_loader): the step went from 181 to 84 ms with 2 workers, not to the ~10 ms of compute; with 4
    workers, 41 ms. A torchvision resnet18 on FakeData kept 1.83 of 2 cores busy with 75 ms of transforms
    beside its compute: the bound leaves 30 ms, not 75, and 2 workers made it 12 ms slower (an upper bound;
    benchmarks/results/loader_workers_cpu.md)."""

    count: int
    why: str  # why that many, from this run's evidence
    cpus: int
    cpu_pct: float | None
    cores_busy: float | None  # the process's CPU time over its wall time in the measured window
    # A batch's time in one worker over the fetch's in the training process: a worker runs one intra-op
    # thread (torch.utils.data's worker loop sets torch.set_num_threads(1)), the training process as many as
    # its ops split into. dataloader_eval_loop's per-item ops on 150-200k elements: 3.25 (estimated from the
    # ops' sizes); its 4 workers took ~16 ms a step on the H100, not the 6.4 ms of fetch / 4.
    one_thread: float = 1.0
    # Where the run has a device timeline, the process's CPU time is no measure of the fetch's work: the
    # intra-op pool spins between the fetch's small ops (dataloader_eval_loop: 13.6 cores "busy" for a fetch
    # whose main thread used one, and whose fix run used 1.14), so the cores bound counts the work instead.
    device_timeline: bool = False

    @classmethod
    def of(
        cls,
        cpus: float | None,
        cpu_pct: float | None,
        cores_busy: float | None = None,
        one_thread: float | None = None,
        device_timeline: bool = False,
    ) -> Workers | None:
        """None without the core count (a run recorded before it was): the whole fetch is then the saving."""
        if not cpus:
            return None
        cores = int(cpus)
        count = loader_worker_count(cores, cpu_pct)
        per_core = f"one worker a core this process may use ({cores}), up to {MAX_LOADER_WORKERS}"
        if cpu_pct is None:
            why = per_core
        elif cpu_pct < WAITING_CPU_PCT:
            why = (
                f"the fetch ran on or waited for a CPU {significant(cpu_pct, 2)}% of its time: it mostly "
                f"waits, and {count} workers overlap the waits whatever the cores ({cores})"
            )
        else:
            share = significant(cpu_pct, 2)
            why = f"the fetch computes ({share}% of its time on or waiting for a CPU): {per_core}"
        return cls(count, why, cores, cpu_pct, cores_busy, max(1.0, one_thread or 1.0), device_timeline)

    def step_ms(self, fetch_ms: float, step_ms: float) -> tuple[float, str]:
        """The step with these workers, and what bounds it: 'rest', 'workers' or 'cores'."""
        rest = max(0.0, step_ms - fetch_ms)
        batch = fetch_ms * self.one_thread  # one batch in one worker
        limits = {"rest": rest, "workers": batch / self.count}
        if self.device_timeline:
            # The step's CPU work with workers: the training thread's rest of the step, and the batches.
            busy_pct = self.cpu_pct if self.cpu_pct is not None else 100.0
            limits["cores"] = (rest + batch * busy_pct / 100.0) / self.cpus
        elif self.cores_busy is not None:
            limits["cores"] = self.cores_busy * step_ms / self.cpus
        elif self.cpu_pct is not None:
            limits["cores"] = (rest + fetch_ms * self.cpu_pct / 100.0) / self.cpus
        bound = max(limits, key=lambda name: limits[name])
        return limits[bound], bound

    def saving_ms(self, fetch_ms: float, step_ms: float) -> float:
        return max(0.0, step_ms - self.step_ms(fetch_ms, step_ms)[0])

    def note(self, fetch_ms: float, step_ms: float) -> str:
        """Why the saving is less than the fetch, where the workers or the cores bound the step."""
        after, bound = self.step_ms(fetch_ms, step_ms)
        if bound == "workers":
            threads = (
                ": a worker runs one intra-op thread, and a batch there takes "
                f"{significant(self.one_thread, 2)}x the fetch's time here (estimated from its ops' sizes)"
                if self.one_thread > 1.0
                else ""
            )
            return (
                f", less the {significant(after)} ms a batch still takes in each of {self.count} workers, "
                f"longer than the rest of the step{threads}"
            )
        if bound == "cores":
            work = (
                f"the process kept {significant(self.cores_busy, 2)} cores busy"
                if self.cores_busy is not None and not self.device_timeline
                else "the rest of the step and the batches' CPU time"
            )
            return (
                f", less what the {self.cpus} cores this process may use cannot run at once: {work}, "
                f"{significant(after)} ms a step on them"
            )
        return ""


def advised_workers(value: Callable[[str], object]) -> Workers | None:
    """The workers the advice gives a loader that fetched in the training process, from the run's metrics
    (`value` of a name; --verify's fix runs as many); None where it had workers already (its __next__ time
    is the wait for them) or the cores were not recorded."""
    if value("data_loader_iterator") != SINGLE_PROCESS_ITERATOR:
        return None
    numbers = {
        name: number if isinstance(number := value(name), int | float) else None
        for name in (
            "host_cpus",
            "data_loader_cpu_pct",
            "host_cores_busy",
            "data_loader_ms",
            "data_loader_one_thread_ms",
            "gpu_busy_ms",
        )
    }
    fetch, one = numbers["data_loader_ms"], numbers["data_loader_one_thread_ms"]
    return Workers.of(
        numbers["host_cpus"],
        numbers["data_loader_cpu_pct"],
        numbers["host_cores_busy"],
        one / fetch if fetch and one else None,
        device_timeline=bool(numbers["gpu_busy_ms"]),  # 0 on a CPU-only run, which has no device work
    )


def loader_stall_fix(inputs: FixInputs) -> Fix | NoFix:
    """Workers fetch the batches: the host time the torch pass measured fetching them leaves the step,
    less what the workers still take where the training process fetched them itself (Workers)."""
    fetch = inputs.number("data_loader_ms")
    if not fetch:
        return NoFix("no batch fetch time measured")
    fetch_ms = fetch * inputs.torch_to_nsys
    basis = f"the batch fetch the torch pass measured: {significant(fetch)} ms per step"
    workers, step = advised_workers(inputs.metrics.get), inputs.number("step_time_ms")
    if workers is not None and step:
        basis += f"; {workers.count} workers ({workers.why})" + workers.note(fetch_ms, step)
        fetch_ms = workers.saving_ms(fetch_ms, step)
    return Fix(
        "less_host_work",
        "batches fetched by DataLoader workers",
        {"saved_ns_per_step": fetch_ms * NS_PER_MS},
        basis,
    )


def loader_in_step_model(inp: Inputs) -> float | None:
    """Without a device timeline (a CPU-only run) the whole fetch is on the step's critical path: the torch
    pass's time inside DataLoader.__next__ is what workers that build batches ahead would take off it, less
    what they still take (Workers)."""
    if inp["gpu_busy_ms"] is not None:
        return None  # a GPU run: data.loader_stall weighs the fetch by the device idle time in it
    workers = advised_workers(inp.values.get)
    fetch = max(0.0, inp["data_loader_ms"])
    return fetch if workers is None else workers.saving_ms(fetch, inp.step_ms)


def loader_in_step_report(ctx: Context, lost_ms: float) -> Report:
    step = ctx.value("step_time_ms", 0.0)
    fetch = ctx.value("data_loader_ms", lost_ms)
    condition = (
        f"{fetch:.3g} of {step:.3g} ms a step is spent fetching batches from the DataLoader, "
        "in the training process"
    )
    single = ctx.value("data_loader_iterator") == SINGLE_PROCESS_ITERATOR
    workers = advised_workers(ctx.value)
    advice = _workers_for_the_fetch(ctx, condition + (" (num_workers=0)" if single else ""), pin=False)
    if not single:
        advice.append(_workers_fall_behind(condition))
    advice.append(
        Suggestion(
            "Make per-item work cheaper (vectorized transforms instead of Python loops over "
            "pixels or tokens, or store preprocessed data); iterate the loader alone to see "
            "the batches per second it delivers",
            condition,
        )
    )
    return Report(
        title="The step waits for the DataLoader",
        pairs=[
            ("host time fetching a batch", "data_loader_ms"),
            ("step time", "step_time_ms"),
            ("DataLoader iterator", "data_loader_iterator"),
            ("CPU cores this process may use", "host_cpus"),
            ("share of the fetch the training thread ran on or waited for a CPU", "data_loader_cpu_pct"),
            ("cores the process kept busy", "host_cores_busy"),
        ],
        explanation=(
            "Each step first builds its batch (reading, decoding, augmenting and collating "
            "every item) in the training process, then computes: the two never overlap. "
            "DataLoader workers build the next batches in other processes while this one "
            "computes; on a CPU-only machine they share its cores, so the saving needs cores the "
            "step does not use. Time lost: the torch "
            "pass's time inside DataLoader.__next__ (torch.profiler's `enumerate(DataLoader)#..."
            "__next__` range) per step" + (workers.note(fetch, step) if workers else "") + "."
        ),
        suggestions=advice,
    )


def pageable_advice(ctx: Context) -> list[Suggestion]:
    condition = (
        f"{ctx.value('pageable_copies_per_step', 0.0):.0f} host<->device copies a step from pageable memory "
        f"({ctx.value('pageable_copy_ms', 0.0):.3g} ms)"
    )
    loaders = ctx.config.data_loaders
    out = []
    if ctx.config.framework == "transformers" and not ctx.config.hf("dataloader_pin_memory"):
        out.append(Suggestion("TrainingArguments(dataloader_pin_memory=True)", condition))
    elif loaders is None or any(not d.get("pin_memory") for d in loaders):
        if ctx.config.pins_without_workers:
            # The loader's own change, worded as the DataLoader finding words it, so the two findings
            # list one change; the non_blocking copy is this finding's alone.
            pinned = (
                f"{condition}; its DataLoaders have pin_memory=False and num_workers=0: pin together with "
                "workers, which pin off the main thread (pinning in the training process runs in the step)"
            )
            out += _workers_for_the_fetch(ctx, pinned)
            out.append(Suggestion("batch.to('cuda', non_blocking=True) on the pinned batches", pinned))
        else:
            state = (
                "a DataLoader of this run has pin_memory=False"
                if loaders
                else "DataLoader settings were not recorded"
            )
            out.append(
                Suggestion(
                    "DataLoader(..., pin_memory=True) and batch.to('cuda', non_blocking=True)",
                    f"{condition}; {state}",
                )
            )
    out.append(
        Suggestion(
            "For tensors built by hand: allocate once with torch.empty(..., pin_memory=True) and copy_ "
            "into it, or call .pin_memory() before .to('cuda', non_blocking=True); keep tensors that "
            "never change on the GPU",
            condition
            + (
                "; the DataLoaders already pin their batches"
                if loaders and all(d.get("pin_memory") for d in loaders)
                else ""
            ),
        )
    )
    return out


def pageable_model(inp: Inputs) -> float | None:
    if inp["pageable_copy_ms"] <= 0:
        return None
    return pageable_copy_lost_ms(
        inp["exposed_pageable_copy_ms"] or 0.0,
        inp["pageable_bytes_per_s"],
        inp.peaks.get("pinned_copy_bytes_per_s"),
    )


def pageable_report(ctx: Context, lost_ms: float) -> Report:
    pinned = ctx.peaks.get("pinned_copy_bytes_per_s")
    return Report(
        title="Host<->device copies use pageable memory",
        pairs=[
            ("pageable copies per step", "pageable_copies_per_step"),
            ("pageable share of copied bytes", "pageable_copy_share_pct"),
            ("pageable copy time", "pageable_copy_ms"),
            ("pageable bandwidth", "pageable_bytes_per_s"),
            ("HtoD share of link peak", "htod_link_pct"),
            ("copy overlapped with compute", "copy_compute_overlap_pct"),
        ],
        explanation=(
            "Copies from pageable host memory are staged by the driver through a pinned bounce buffer: "
            "they run at a fraction of the link's bandwidth, block the host for their whole duration "
            "and cannot overlap with compute. Pinned memory copies at close to the link rate and, with "
            "non_blocking=True, asynchronously. Time lost assumes the pinned rate of "
            f"{(pinned or 0) / 1e9:.0f} GB/s (estimated: 80% of the link's peak)."
        ),
        suggestions=pageable_advice(ctx),
    )


def pageable_fix(inputs: FixInputs) -> Fix | NoFix:
    if inputs.pinned_copy is None:
        return NoFix("no pinned copy bandwidth known for this machine")
    rate, basis = inputs.pinned_copy
    return Fix("pinned_copies", "pinned host memory and non_blocking copies", {"bytes_per_s": rate}, basis)


def exposed_copies_model(inp: Inputs) -> float | None:
    exposed_pinned = inp["exposed_copy_ms"] - (inp["exposed_pageable_copy_ms"] or 0.0)
    return exposed_copy_lost_ms(exposed_pinned, inp["kernel_time_ms"] or 0.0)


def exposed_copies_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Pinned copies do not overlap with compute",
        pairs=[
            ("copy overlapped with compute", "copy_compute_overlap_pct"),
            ("exposed copy time", "exposed_copy_ms"),
            ("host->device copies per step", "htod_count"),
        ],
        explanation=(
            "Copies run while no kernel runs, so the step pays for them in full. Issued with "
            "non_blocking=True (and, for prefetching, on a side stream) the next batch's copy runs "
            "under this step's compute."
        ),
        suggestions=[
            Suggestion(
                "Use .to('cuda', non_blocking=True) on pinned tensors, and prefetch the next batch on a "
                "separate torch.cuda.Stream while the current one computes",
                f"{lost_ms:.3g} ms a step of pinned copies run while no kernel runs",
            )
        ],
    )


def _loader_advice(ctx: Context, condition: str) -> list[Suggestion]:
    if ctx.value("data_loader_iterator") == SINGLE_PROCESS_ITERATOR or ctx.config.data_loaders == []:
        # The loader findings' change in their words (the count, pinning only with a device timeline), so
        # that a variation in their time is their alternative (jitter_is_theirs).
        return _workers_for_the_fetch(ctx, condition, pin=ctx.value("gpu_busy_ms") is not None)
    return [
        Suggestion(
            "Raise the DataLoader's prefetch_factor (and num_workers, up to the free CPU cores), so the "
            "batches that take longer to build are ready before they are needed",
            condition + " from worker processes that fall behind on some batches",
        )
    ]


def _device_side_advice(ctx: Context, condition: str) -> list[Suggestion]:
    slow_kernels, typical_kernels = (
        ctx.value("slow_step_kernels", 0.0),
        ctx.value("typical_step_kernels", 0.0),
    )
    if round(slow_kernels) != round(typical_kernels):
        return [
            Suggestion(
                "Give every step the same work: pad or bucket variable-size inputs to a few fixed shapes "
                "(sequence lengths, image sizes), and keep data-dependent branches out of the step",
                f"{condition}; a slow step launches {slow_kernels:.0f} kernels, a typical one "
                f"{typical_kernels:.0f}",
            )
        ]
    return [
        Suggestion(
            "Look for another process or a clock change on this GPU during the run (nvidia-smi: "
            "processes, clocks, throttle reasons): the same kernels ran longer on some steps",
            f"{condition}; slow and typical steps launch the same {typical_kernels:.0f} kernels",
            locates_code=True,
        )
    ]


def _slow_steps_ran_typical_shapes(ctx: Context) -> str | None:
    """How the evidence says the slow steps' inputs were the typical ones, or None: the ops that grew ran
    shapes earlier typical steps ran, or (where those ops record no shapes) every step's top-level ops ran one
    set of input shapes. A segmentation loop on fixed 480x480 crops (one shape set in 20 steps, on the H100)
    was told to pad or bucket inputs whose size varies, as the ops that grew there keep no shapes."""
    if ctx.value("slow_step_new_shapes") == "none":
        return "with the input shapes the typical steps ran"
    if ctx.value("slow_step_new_shapes") is None and ctx.value("step_shape_signatures") == 1:
        return "and every step ran one set of input shapes"
    return None


def _host_side_advice(ctx: Context, condition: str) -> list[Suggestion]:
    gc_ms = ctx.value("gc_ms_per_step")
    out = freeze_gc(
        gc_ms,
        ctx.value("gc_collections_per_step"),
        ctx.value("gc_longest_ms"),
        collect_site=gc_collect_site(ctx),
        host_ms=ctx.value("later_steps_mean_over_median_ms", 0.0),
        condition=condition,
        slow_step_extra_ms=ctx.value("slow_step_extra_ms"),
    )
    ops = ctx.value("slow_step_extra_ops")
    if ops and ops != "none":
        if ctx.config.compiled and any(mark in ops for mark in COMPILED_OP_MARKS):
            out.append(
                Suggestion(
                    "Check for recompiles with TORCH_LOGS=recompiles and mark the varying dimension "
                    "dynamic (torch._dynamo.mark_dynamic) or fix it",
                    f"{condition}; the extra host time is in the compiled function's calls: {ops}",
                )
            )
        elif same_shapes := _slow_steps_ran_typical_shapes(ctx):
            # Same ops, same shapes, more time: nothing in the step's inputs varies (the gc.freeze() twin of
            # gc_every_fourth_step on the CPU, 464 us steps, 8 of 19 slower at the run's start and end, was
            # told to pad its inputs).
            out.append(
                Suggestion(
                    "Look for what slowed the host on the slow steps (other processes on its cores, a "
                    "change of torch's thread count, CPU frequency): the same ops took longer on the same "
                    "inputs",
                    f"{condition}; the slow steps spend more host time in {ops}, {same_shapes}",
                )
            )
        else:
            out.append(
                same_inputs_every_step(
                    ops,
                    ctx.value("slow_step_new_shapes"),
                    ctx.config,
                    ctx.op_names,
                    condition=condition,
                )
            )
    elif ctx.value("slow_step_extra_cause") == "launch_gap":
        # The device waits on launches the host issues slower on some steps: launches replayed from a
        # CUDA graph no longer follow the host's pace.
        out += use_cuda_graphs(
            ctx.config,
            condition=f"{condition}; the device waits between kernels for the host to launch them",
        )
    elif not out and "one every" in str(ctx.value("slow_steps") or ""):
        # Periodic work other than the collector: where a gc.collect() or the collector's own passes
        # were timed on those steps, that advice is the periodic work's.
        out.append(
            Suggestion(
                "Make the loop's periodic work (logging, evaluation, checkpointing every few steps) "
                "asynchronous or less frequent",
                f"{condition}; the slow steps come at a fixed stride, and no torch op grows on them",
            )
        )
    lines = ctx.value("slow_step_extra_lines")
    if not out and lines:
        # The samples already say where: the lines to look at rather than how to find them. It names no
        # change of its own, so the variation stays the finding's whose host work those lines are.
        out.append(
            Suggestion(
                f"Look at {ctx.value('slow_step_extra_line')} first: the slow steps' extra host time is "
                "there; work whose size or path varies from step to step (tokenizing or decoding inputs of "
                "varying size, Python loops over them) is typical",
                f"{condition}; the Python samples put it at {lines}",
                locates_code=True,
            )
        )
    if not out:
        gc = (
            f"Python's collector took {significant(gc_ms, 2)} ms a step"
            if gc_ms is not None
            else "Python's collector was not timed in this capture"
        )
        out.append(
            Suggestion(
                "Sample the script's Python on the slow steps (py-spy record, or pyinstrument) to find the "
                "code whose time varies: tokenizing or decoding inputs of varying size in the loop is "
                "typical",
                f"{condition}; no torch op's host time grows on them and {gc}",
                locates_code=True,
            )
        )
    return out


def jitter_advice(ctx: Context) -> list[Suggestion]:
    """What removes the variation, from where the slow steps' extra time goes (hybrid.analysis.jitter):
    a DataLoader fetch, device work that differs or runs slower, host work in named ops, Python's
    collector, periodic work."""
    slow, extra = ctx.value("slow_steps"), ctx.value("slow_step_extra_ms")
    if slow is None or extra is None:
        return []
    causes = ctx.value("slow_step_extra_causes")
    condition = f"slow steps ({slow}) take {significant(extra, 2)} ms more than typical ones" + (
        f", in {causes}" if causes else ""
    )
    cause = ctx.value("slow_step_extra_cause")
    if cause == "dataloader_fetch":
        return _loader_advice(ctx, condition)
    if cause in BUSY_ORDER:
        return _device_side_advice(ctx, condition)
    return _host_side_advice(ctx, condition)


def jitter_model(inp: Inputs) -> float | None:
    # The first measured step runs as the collector starts; the variation that costs the loop is the
    # later steps' (hybrid.analysis.jitter). Their mean over the median is bounded by the whole mean's: with
    # stalls every 4th step the later steps' mean was 103% of the mean step, first step included.
    if inp["later_steps_cv_pct"] < STEP_CV_PCT:
        return None
    return min(
        inp["later_steps_mean_over_median_ms"], max(0.0, inp["step_time_ms"] - inp["step_time_median_ms"])
    )


def jitter_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Step time varies from step to step",
        pairs=[
            ("step time CV after the first step", "later_steps_cv_pct"),
            ("median step", "step_time_median_ms"),
            ("slow steps", "slow_steps"),
            ("a slow step's extra time", "slow_step_extra_ms"),
            ("where it goes", "slow_step_extra_causes"),
            ("ops whose host time grows", "slow_step_extra_ops"),
            ("lines whose sampled host time grows", "slow_step_extra_lines"),
            ("their input shapes only slow steps ran", "slow_step_new_shapes"),
            ("kernels a step, slow / typical", "slow_step_kernels"),
            ("Python GC time a step", "gc_ms_per_step"),
        ],
        explanation=(
            "Some steps take longer than others; the time lost is what the slower steps add to the mean "
            "over the median step. Where their extra time goes says why: waiting for a batch, device work "
            "that differs from step to step, or host work (named ops, Python's garbage collector, "
            "periodic work in the loop)."
        ),
        suggestions=jitter_advice(ctx),
    )


def jitter_is_theirs(ctx: Context, finding: Finding, others: list[Finding]) -> list[str]:
    """The findings whose time the slow steps' extra time is, where at least half of it lies in causes they
    claimed and every change the jitter finding advises is one of theirs (or it advises none, only how to
    find the code). torchaudio's num_workers=0 loader: slow steps 2.1 ms longer, 1.6 ms of it in the fetch,
    host work and copies that the loader, dispatch and pageable-copy findings claim, and the same DataLoader
    change as the loader's; sentence-transformers' encode(): 2.9 of 3.5 ms in the host work the
    preprocessing finding claims, and only a sampling profiler to run."""
    extra_ms = ctx.value("slow_step_extra_ms")
    if not extra_ms:
        return []
    claimed_by: dict[str, list[str]] = {}  # cause -> the findings that drew on it
    for other in others:
        for cause, ms in other.claimed.items():
            if ms > 0 and ctx.value(f"slow_step_extra_{cause}_ms", 0.0) > 0:
                claimed_by.setdefault(cause, []).append(other.id)
    # Each cause once, however many findings drew on it.
    if sum(ctx.value(f"slow_step_extra_{cause}_ms") for cause in claimed_by) < JITTER_THEIRS_SHARE * extra_ms:
        return []
    owners = sorted({finding_id for ids in claimed_by.values() for finding_id in ids})
    theirs = {advice["text"] for other in others if other.id in owners for advice in other.advice}
    own_changes = [advice["text"] for advice in finding.advice if not advice.get("locates_code")]
    return owners if all(text in theirs for text in own_changes) else []


RULES = [
    Rule(
        "data.loader_stall",
        "DATA_PIPELINE",
        ("data_loader_idle_ms", "step_time_ms"),
        loader_stall_model,
        loader_stall_report,
        pool=("dataloader_fetch",),
        floor_pct=LOADER_STALL_MIN_PCT,
        fix=loader_stall_fix,
        switches=(LOADER_WORKERS,),
    ),
    # A run without a device timeline: the fetch itself is the step's wait (host-side rules run on the CPU).
    Rule(
        "data.loader_in_step",
        "DATA_PIPELINE",
        ("data_loader_ms", "step_time_ms"),
        loader_in_step_model,
        loader_in_step_report,
        optional=(
            "gpu_busy_ms",
            "data_loader_iterator",
            "host_cpus",
            "data_loader_cpu_pct",
            "host_cores_busy",
        ),
        floor_pct=LOADER_STALL_MIN_PCT,
        host_side=True,
        switches=(LOADER_WORKERS,),
    ),
    # The copy pool after cpu.late_migration and cpu.transfers took theirs.
    Rule(
        "copy.pageable",
        "DATA_PIPELINE",
        ("pageable_copy_ms", "step_time_ms"),
        pageable_model,
        pageable_report,
        optional=("exposed_pageable_copy_ms", "pageable_bytes_per_s"),
        pool=("copy",),
        floor_pct=MIN_LOST_PCT,
        fix=pageable_fix,
        copies=CopyFilter(kinds=("HtoD", "DtoH", "HtoH"), pinned=False),
        switches=(LOADER_PIN_MEMORY,),
    ),
    Rule(
        "copy.not_overlapped",
        "DATA_PIPELINE",
        ("exposed_copy_ms", "step_time_ms"),
        exposed_copies_model,
        exposed_copies_report,
        optional=("exposed_pageable_copy_ms", "kernel_time_ms"),
        pool=("copy",),
        floor_pct=MIN_LOST_PCT,
        copies=CopyFilter(pinned=True),
    ),
    # Step-to-step variance is not a share of one step's window: it reads no ledger pool. The host's step
    # times vary without a GPU too (host-side rules run on the CPU).
    Rule(
        "steps.jitter",
        "DATA_PIPELINE",
        ("later_steps_cv_pct", "later_steps_mean_over_median_ms", "step_time_ms", "step_time_median_ms"),
        jitter_model,
        jitter_report,
        floor_pct=MIN_LOST_PCT,
        host_side=True,
        alternative_when=jitter_is_theirs,
    ),
]
