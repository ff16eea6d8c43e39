"""Communication between ranks of a multi-process job (hybrid.analysis.job_metrics computes the metrics):
exposed
communication, a straggler rank, communication-bound steps, host-side collectives and barriers.

These rules read job-level metrics (means over ranks, per step); `step_time_ms` is the job's step,
the slowest rank's, since ranks that meet in collectives move at the pace of the last one.
"""

from __future__ import annotations

from hybrid.rules.advice import Suggestion
from hybrid.rules.base import Context, Evidence, Inputs, Report, Rule

# 5% of the step is SEVERITY_FLOORS' MODERATE floor: the smallest gain worth a code change.
MIN_LOST_PCT = 5.0
# Transfer time at or above compute time: even perfect overlap leaves the step waiting on the network.
COMM_BOUND_RATIO = 1.0


def hideable_comm_ms(exposed_ms: float, wait_ms: float, comm_ms: float, compute_ms: float) -> float:
    """What better overlap could hide: the exposed time that is transfer rather than waiting for a
    late peer (that is the straggler's), at most the compute not yet overlapped with communication.
    An upper bound: DDP can overlap only with the backward pass."""
    exposed_transfer = max(0.0, exposed_ms - max(0.0, wait_ms))
    overlapped = max(0.0, comm_ms - exposed_ms)
    room = max(0.0, compute_ms - overlapped)
    return min(exposed_transfer, room)


def unhideable_comm_ms(comm_ms: float, wait_ms: float, compute_ms: float) -> float:
    """Transfer time no overlap can hide: what exceeds the compute it could run under."""
    return max(0.0, (comm_ms - max(0.0, wait_ms)) - compute_ms)


def _replayed(ctx: Context, fix: str) -> str:
    saving = ctx.value("overlap_replay_saving_ms")
    if saving is None or ctx.value("overlap_replay_fix") != fix:
        return ""
    return f"; the replay of this fix on the measured steps saves {saving:.3g} ms a step"


def fsdp2_advice(ctx: Context, condition: str) -> list[Suggestion]:
    """fully_shard's own switches, from this run's settings: per-block units where one unit holds every
    parameter, explicit prefetch where all-gathers are exposed and it is off, reshard_after_forward=False
    where blocks gather again in backward."""
    fsdp2 = ctx.config.fsdp2 or {}
    units = fsdp2.get("units_with_params") or 0
    gather_ms = ctx.value("exposed_all_gather_ms", 0.0)
    out = []
    if units == 1:
        blocks = fsdp2.get("root_leaf_modules")
        out.append(
            Suggestion(
                "Call fully_shard on each block (each transformer layer) before the root, so a block's "
                "all-gather overlaps the compute of the block before it and its reduce-scatter overlaps the "
                "rest of the backward; reshard_after_forward=False keeps each block gathered once a step as "
                "the one unit was (True frees it after forward and gathers it again in backward)",
                f"{condition}; one FSDP unit holds every parameter"
                + (f" ({blocks} parameter-holding modules)" if blocks else "")
                + _replayed(ctx, "per_block"),
            )
        )
    if units > 1 and gather_ms > 0:
        gather = f"{condition}; {gather_ms:.3g} ms a step of all-gathers run with no compute beside them"
        calls = ("set_modules_to_forward_prefetch", "set_modules_to_backward_prefetch")
        depths = {
            call: int(fsdp2.get(call.removeprefix("set_modules_to_") + "_depth") or 0) for call in calls
        }
        unset = [call for call in calls if not depths[call]]
        if unset:
            out.append(
                Suggestion(
                    "Prefetch the next block's parameters explicitly: for each block, "
                    + " and ".join(f"block.{call}([the block that runs next])" for call in unset),
                    gather
                    + f"; {units} FSDP units, "
                    + " and ".join(call.removeprefix("set_modules_to_") for call in unset)
                    + " not set"
                    + _replayed(ctx, "prefetch"),
                )
            )
        else:
            depth = min(depths.values())
            out.append(
                Suggestion(
                    f"Prefetch {depth + 1} blocks ahead: pass the {depth + 1} blocks that run next to "
                    + " and ".join(f"block.{call}" for call in calls),
                    gather
                    + f"; explicit prefetch reaches {depth} block(s) ahead"
                    + _replayed(ctx, "prefetch"),
                )
            )
        resharded = fsdp2.get("reshard_after_forward_units") or 0
        backward_gather_ms = ctx.value("exposed_all_gather_backward_ms", 0.0)
        if resharded and backward_gather_ms > 0:
            mb = fsdp2.get("param_mb")
            out.append(
                Suggestion(
                    "Pass reshard_after_forward=False to fully_shard for the blocks: their parameters stay "
                    "gathered from forward to backward, so backward gathers nothing"
                    + (f" (at the cost of up to {mb:g} MB of unsharded parameters per rank)" if mb else ""),
                    f"{condition}; {backward_gather_ms:.3g} ms a step of all-gathers in the backward run "
                    f"with no compute beside them; {resharded} of {units} units reshard after forward and "
                    "gather again in backward",
                )
            )
    return out


def exposed_advice(ctx: Context, hideable_ms: float) -> list[Suggestion]:
    """DDP's own overlap for a job without DDP; bucket sizes for one with it; fully_shard's switches for
    FSDP2; FSDP's prefetch for FSDP1. Without a recorded configuration, which wrapper is in use is unknown
    and each says so."""
    config = ctx.config
    condition = (
        f"{ctx.value('exposed_comm_ms', 0.0):.3g} ms a step of collectives run with no compute beside them "
        f"({hideable_ms:.3g} ms of it could overlap)"
    )
    if config.fsdp2:
        return fsdp2_advice(ctx, condition)
    out = []
    if config.ddp is not True and config.fsdp is not True:
        state = (
            "no DistributedDataParallel or FSDP wrapper was found"
            if config.recorded
            else "no DistributedDataParallel reducer ran in the measured steps (torch trace)"
            if config.ddp is False
            else "the job's DDP/FSDP wrappers were not recorded"
        )
        out.append(
            Suggestion(
                "Let DistributedDataParallel reduce the gradients (it overlaps bucketed all-reduces with "
                "backward) instead of calling all_reduce after backward()",
                f"{condition}; {state}" + _replayed(ctx, "spread"),
            )
        )
    if config.ddp is not False:
        cap, params = config.ddp_bucket_cap_mb, config.ddp_param_mb
        if cap and params and cap >= params:
            out.append(
                Suggestion(
                    f"Lower DDP's bucket_cap_mb from {cap:g} to the default 25: one bucket holds all "
                    f"{params:g} MB of gradients, so its all-reduce starts only after the whole backward",
                    condition + "; the model is DDP-wrapped" + _replayed(ctx, "spread"),
                )
            )
        else:
            out.append(
                Suggestion(
                    f"Lower DDP's bucket_cap_mb (now {cap:g}) so the first buckets start during backward"
                    if cap
                    else "Lower DDP's bucket_cap_mb (default 25) so the first buckets start during "
                    "backward; with many small parameters try gradient_as_bucket_view=True; with gradient "
                    "accumulation wrap every micro-batch but the last in model.no_sync()",
                    condition + ("; the model is DDP-wrapped" if config.ddp else ""),
                )
            )
    if config.fsdp:
        out.append(
            Suggestion(
                "Keep FSDP's backward_prefetch=BACKWARD_PRE and forward_prefetch=True",
                condition + "; the model is FSDP-wrapped",
            )
        )
    return out


def comm_bound_advice(ctx: Context, lost_ms: float) -> list[Suggestion]:
    condition = (
        f"collectives take {ctx.value('comm_ms', 0.0):.3g} ms a step against "
        f"{ctx.value('compute_ms', 0.0):.3g} ms of compute"
    )
    out = [
        Suggestion(
            "Raise the per-GPU batch size (or accumulate gradients over micro-batches with no_sync()); use "
            "fewer ranks for a model this small; check the interconnect (NCCL_DEBUG=INFO shows whether "
            "NVLink/IB or a socket fallback is used)",
            condition,
        )
    ]
    if ctx.config.ddp is not False:
        out.append(
            Suggestion(
                "Compress gradients with DDP's bf16 hook: model.register_comm_hook(None, "
                "default_hooks.bf16_compress_hook)",
                condition
                + ("; the model is DDP-wrapped" if ctx.config.ddp else "; DDP use was not recorded"),
            )
        )
    return out


def host_sync_advice(ctx: Context, barriers: float, host_collectives: float) -> list[Suggestion]:
    out = []
    if barriers > 0:
        out.append(
            Suggestion(
                "Remove dist.barrier() from the training step; synchronize only around checkpoints",
                f"{barriers:.0f} barriers a step",
            )
        )
    if host_collectives > 0:
        out.append(
            Suggestion(
                "Reduce metrics on the GPU with NCCL and read them every N steps, not with *_object "
                "collectives; create process groups with backend='cpu:gloo,cuda:nccl' for GPU tensors",
                f"{host_collectives:.0f} CPU (gloo) collectives a step in a GPU job",
            )
        )
    return out


def exposed_bound(inp: Inputs) -> float:
    return hideable_comm_ms(inp["exposed_comm_ms"], inp["wait_ms"] or 0.0, inp["comm_ms"], inp["compute_ms"])


def exposed_model(inp: Inputs) -> float | None:
    """The replayed saving of the overlap fix that applies to this job (hybrid.replay.overlap), at most the
    closed-form bound; the bound alone where nothing was replayed."""
    bound = exposed_bound(inp)
    replayed = inp["overlap_replay_saving_ms"]
    return bound if replayed is None else min(bound, float(replayed))


def replay_outcome(finding_id: str, ctx: Context) -> tuple[float | None, str | None]:
    """For a job finding: (its closed-form figure, None) where its time lost is the collectives' replay, else
    (None, why it is the closed form)."""
    replayed = ctx.value("overlap_replay_saving_ms")
    if finding_id != "comm.exposed" or replayed is None:
        return None, JOB_FINDING_MODEL
    values = {
        name: ctx.value(name) or 0.0 for name in ("exposed_comm_ms", "wait_ms", "comm_ms", "compute_ms")
    }
    bound = hideable_comm_ms(
        values["exposed_comm_ms"], values["wait_ms"], values["comm_ms"], values["compute_ms"]
    )
    if replayed > bound:
        # The replay keeps a collective's wait for its peers in its time; the bound does not, and is kept.
        return None, (
            f"the replay of the overlap fix ({replayed:.3g} ms) exceeds the closed-form bound, which leaves "
            "out the time spent waiting for peers"
        )
    return bound, None


def exposed_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Communication is exposed: collectives run while no compute does",
        pairs=[
            ("time in collectives per step", "comm_ms"),
            ("exposed (no compute running)", "exposed_comm_ms"),
            ("all-gather exposed", "exposed_all_gather_ms"),
            ("reduce-scatter exposed", "exposed_reduce_scatter_ms"),
            ("all-reduce exposed", "exposed_all_reduce_ms"),
            ("overlap with compute", "overlap_pct"),
            ("of which waiting for peers", "wait_ms"),
            ("compute per step", "compute_ms"),
            ("job step time", "step_time_ms"),
            ("fix replayed", "overlap_replay_fix"),
            ("replayed saving", "overlap_replay_saving_ms"),
        ],
        explanation=(
            "A collective the step waits on with nothing else to run leaves the device (or CPU) idle for the "
            "whole transfer: an FSDP all-gather issued only when its block is about to run, a reduce-scatter "
            "or all-reduce that starts only after the backward pass has finished. DDP overlaps them "
            "with the backward pass by reducing buckets as soon as their gradients are ready; that overlap "
            "is lost when gradients are all-reduced by hand after backward(), when one bucket holds every "
            "gradient, or when no_sync() is left off the last micro-batch only."
        ),
        suggestions=exposed_advice(ctx, lost_ms),
    )


def straggler_model(inp: Inputs) -> float | None:
    return inp["straggler_lateness_ms"]


def straggler_report(ctx: Context, lost_ms: float) -> Report:
    rank = ctx.value("straggler_rank")
    job = ctx.job
    extra = (
        [
            Evidence(
                f"rank {rank}'s own top finding",
                job.straggler_primary_title,
                "",
                job.straggler_primary_source,
            )
        ]
        if job is not None and job.straggler_primary_title
        else []
    )
    return Report(
        title=f"Rank {rank} is a straggler: the other ranks wait for it in every step",
        pairs=[
            ("straggler rank", "straggler_rank"),
            ("others wait for it, per step", "straggler_lateness_ms"),
            ("collectives it arrived at last", "straggler_arrived_last_pct"),
            ("the others wait for it at", "straggler_waited_at"),
            ("its compute per step beyond the others'", "straggler_extra_compute_ms"),
            ("step time spread across ranks", "step_time_spread_ms"),
            ("job step time", "step_time_ms"),
        ],
        extra=extra,
        explanation=(
            f"Rank {rank} reaches the collectives last, so every other rank spends that time waiting "
            "inside them and the whole job runs at its pace. The cause is on that rank: more work "
            "(uneven batches or sequence lengths), a slower input pipeline, host work such as logging "
            "or checkpointing done by one rank, or a slower or throttled device. Its own report "
            f"(`hybrid report RUN_DIR --rank {rank}`) shows where its step goes."
        ),
        suggestions=straggler_advice(ctx, rank, lost_ms),
    )


def straggler_advice(ctx: Context, rank: int, lost_ms: float) -> list[Suggestion]:
    """The straggler's cause as the job's figures tell it (hybrid.analysis.job_metrics.straggler_cause):
    extra compute (uneven work), else time outside compute (its own top finding)."""
    extra = ctx.value("straggler_extra_compute_ms")
    waits = f"the other ranks wait {lost_ms:.3g} ms a step for rank {rank} in the collectives"
    report = f"`hybrid report RUN_DIR --rank {rank}`"
    if extra is not None and ctx.value("straggler_cause") == "more_compute":
        return [
            Suggestion(
                "Balance the work per rank: equal batch sizes, sequences bucketed by length so each rank's "
                f"batch holds as many tokens; {report} shows which operators and kernels take the extra time",
                f"{waits}; rank {rank} computes {extra:.3g} ms a step more than the others",
            )
        ]
    own = ctx.job.straggler_primary_title if ctx.job is not None else None
    return [
        Suggestion(
            f"Fix rank {rank}'s own top finding first"
            + (f" ({own})" if own else f" ({report})")
            + f"; move rank-{rank}-only work (logging, evaluation, checkpoint writes) off the step; check "
            "the device (clocks, temperature, placement: nvidia-smi -q)",
            f"{waits}"
            + (
                f"; its compute per step differs from the others' by {extra:+.3g} ms, so the time goes "
                "outside compute (host work, input, waiting)"
                if extra is not None
                else ""
            ),
        )
    ]


def bound_model(inp: Inputs) -> float | None:
    comm, wait, compute = inp["comm_ms"], inp["wait_ms"] or 0.0, inp["compute_ms"]
    transfer = max(0.0, comm - max(0.0, wait))
    if compute > 0 and transfer / compute < COMM_BOUND_RATIO:
        return None
    return unhideable_comm_ms(comm, wait, compute)


def bound_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="The step is communication-bound: collectives take longer than the compute",
        pairs=[
            ("time in collectives per step", "comm_ms"),
            ("of which waiting for peers", "wait_ms"),
            ("compute per step", "compute_ms"),
            ("job step time", "step_time_ms"),
        ],
        explanation=(
            "Each rank computes for less time than its collectives take to move the data, so even "
            "perfect overlap leaves the step waiting on the interconnect. Typical when the model is "
            "small or the per-GPU batch is small for the number of ranks, or when gradients travel in "
            "fp32 over a slow link."
        ),
        suggestions=comm_bound_advice(ctx, lost_ms),
    )


def host_sync_model(inp: Inputs) -> float | None:
    if (inp["barriers_per_step"] or 0.0) <= 0 and (inp["host_collectives_on_cuda_per_step"] or 0.0) <= 0:
        return None
    return inp["barrier_ms"] or 0.0


def host_sync_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Ranks synchronize on the host inside the step",
        pairs=[
            ("barriers per step", "barriers_per_step"),
            ("time in barriers per step", "barrier_ms"),
            ("CPU (gloo) collectives per step in a GPU job", "host_collectives_on_cuda_per_step"),
        ],
        explanation=(
            "A barrier, or a collective run by the CPU (gloo) in a GPU job, stops every rank's host until "
            "the slowest one arrives, and data moved through the CPU must first be copied off the GPU. "
            "Common sources: dist.barrier() in the loop, all_gather_object/broadcast_object_list for "
            "metrics, loss.item() after an all_reduce, a gloo process group used for GPU tensors."
        ),
        suggestions=host_sync_advice(
            ctx, ctx.value("barriers_per_step", 0.0), ctx.value("host_collectives_on_cuda_per_step", 0.0)
        ),
    )


# Why a job finding keeps its closed form where the collectives' replay does not apply.
JOB_FINDING_MODEL = "a job finding from the ranks' collective times: only exposed communication is replayed"

# Job-level figures (means over ranks, per step) with no ledger of their own: the job's step is the
# slowest rank's, and these findings are bounded by their models alone.
# The job's findings are made of every rank's step and collective times, not of one timeline's events: the
# ranks' own findings name their lines.
JOB_CALLSITE_REASON = (
    "no callsite: a finding of the whole job, from the ranks' step and collective times; each rank's "
    "report (--rank N) names the lines of its own findings"
)

RULES = [
    Rule(
        "comm.exposed",
        "COMMUNICATION",
        ("exposed_comm_ms", "comm_ms", "compute_ms", "step_time_ms"),
        exposed_model,
        exposed_report,
        optional=("wait_ms", "overlap_replay_saving_ms"),
        floor_pct=MIN_LOST_PCT,
    ),
    Rule(
        "comm.straggler",
        "COMMUNICATION",
        ("straggler_rank", "straggler_lateness_ms", "step_time_ms"),
        straggler_model,
        straggler_report,
        floor_pct=MIN_LOST_PCT,
    ),
    Rule(
        "comm.bound",
        "COMMUNICATION",
        ("comm_ms", "compute_ms", "step_time_ms"),
        bound_model,
        bound_report,
        optional=("wait_ms",),
        floor_pct=MIN_LOST_PCT,
    ),
    Rule(
        "comm.host_sync",
        "COMMUNICATION",
        ("step_time_ms",),
        host_sync_model,
        host_sync_report,
        optional=("barriers_per_step", "host_collectives_on_cuda_per_step", "barrier_ms"),
    ),
]
