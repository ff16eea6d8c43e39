"""Replay of one rank's step with its collectives issued earlier: what overlapping or prefetching them
would save (hybrid.analysis.collectives measures the step).

The step is a chain of the rank's own work (compute, host latency: everything but waits on collectives),
measured as progress: time since the step began, less the time spent waiting. Each collective is issued
at a point of that chain and its result is needed at another (where the chain waited for it, or where it
ended when nothing waited), and the link runs one collective at a time, in issue order, each for the time
it held the link beyond the collectives before it. Replaying the measured chain gives the measured step
exactly (tested on the committed H200 and gloo captures), so a fix's saving is the difference between two
replays of one model.

A fix moves issue points earlier, never a collective's own time:
- `prefetch`: an all-gather issued one wait earlier than it was, one unit further ahead (FSDP2's
  set_modules_to_forward_prefetch / set_modules_to_backward_prefetch, or one more block in them);
- `spread`: gradient reductions issued through the backward pass as their gradients become ready
  (DDP's buckets, FSDP's per-block reduce-scatters), readiness assumed even over the backward's progress;
- `split_gather`: one all-gather of every parameter cut into per-block pieces, each needed an even share of
  the forward later (fully_shard on each block).
A collective's time includes any wait for a late peer, kept as measured: the peers are assumed to move
their collectives earlier alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from hybrid.analysis.collectives import (
    GRADIENT_REDUCTIONS,
    StepCollectives,
    exposed_by_collective_ms,
)
from hybrid.numbers import NS_PER_MS
from hybrid.provenance import ESTIMATED, Metric
from nsight.intervals import covered_before


@dataclass(frozen=True)
class Link:
    """One collective in the chain: issued at progress `issue`, its result needed at progress `need`."""

    kind: str
    issue: int
    need: int
    own_ns: int


@dataclass(frozen=True)
class Chain:
    length: int  # progress at the step's end: the step's time less its waits
    links: tuple[Link, ...]
    backward: int | None  # progress where the backward pass began, None where unseen


def chain_of(step: StepCollectives) -> Chain:
    waits = step.waits

    def progress(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, np.int64)
        return t - step.start_ns - covered_before(waits[:, 0], waits[:, 1], t)

    comm = step.comm
    starts, ends = comm["start_ns"].to_numpy(np.int64), comm["end_ns"].to_numpy(np.int64)
    busy_until = np.r_[step.start_ns, np.maximum.accumulate(ends)[:-1]] if len(ends) else ends
    own = np.maximum(0, ends - np.maximum(starts, busy_until))
    issue, need = progress(starts), progress(ends)
    links = tuple(
        Link(str(kind), int(i), int(n), int(o))
        for kind, i, n, o in zip(comm["collective"], issue, need, own, strict=True)
    )
    backward = None if step.backward_ns is None else int(progress(np.array([step.backward_ns]))[0])
    return Chain(int(progress(np.array([step.end_ns]))[0]), links, backward)


def simulate(chain: Chain) -> int:
    """The step's time (ns): the chain run with its waits, the link serving collectives in issue order."""
    events = sorted(
        [(link.issue, 0, k) for k, link in enumerate(chain.links)]
        + [(link.need, 1, k) for k, link in enumerate(chain.links)]
    )
    delay, link_free = 0, -(2**62)
    ends: dict[int, int] = {}
    for point, is_need, k in events:
        now = point + delay
        if not is_need:
            start = max(now, link_free)
            ends[k] = link_free = start + chain.links[k].own_ns
        elif ends[k] > now:
            delay += ends[k] - now
    return chain.length + delay


def prefetch(chain: Chain, kinds: tuple[str, ...] = ("all_gather",)) -> Chain:
    """Each collective of `kinds` issued where the last need before its issue was (else at the step's start):
    one unit further ahead than it ran."""
    needs = sorted(link.need for link in chain.links)
    out = []
    for link in chain.links:
        if link.kind in kinds:
            earlier = [n for n in needs if n < link.issue]
            link = replace(link, issue=earlier[-1] if earlier else 0)
        out.append(link)
    return replace(chain, links=tuple(out))


def spread(chain: Chain, pieces: int | None = None) -> Chain | None:
    """The gradient reductions issued after the backward pass began, issued through it as their gradients
    become ready: piece j of n once (j+1)/n of the progress from the backward's start to the last reduction's
    issue has run, or where it was issued if that was earlier (the last stays where it was). With `pieces`
    and a single reduction, that reduction is cut into `pieces` equal parts. None when the backward's start
    is unknown or no reduction follows it."""
    if chain.backward is None:
        return None
    late = [
        k
        for k, link in enumerate(chain.links)
        if link.kind in GRADIENT_REDUCTIONS and link.issue > chain.backward
    ]
    if not late:
        return None
    links = [chain.links[k] for k in late]
    if pieces and pieces > 1 and len(links) == 1:
        one = links[0]
        links = [replace(one, own_ns=one.own_ns // pieces) for _ in range(pieces)]
    last = max(link.issue for link in links)
    n = len(links)
    moved = [
        replace(link, issue=min(link.issue, chain.backward + (last - chain.backward) * (j + 1) // n))
        for j, link in enumerate(links)
    ]
    kept = [link for k, link in enumerate(chain.links) if k not in set(late)]
    return replace(chain, links=tuple(sorted(kept + moved, key=lambda link: (link.issue, link.need))))


def split_gather(chain: Chain, pieces: int) -> Chain | None:
    """The step's first all-gather, one for every parameter, cut into `pieces` per-block gathers: piece j
    needed j/n of the forward later (the forward runs from the gather's need to the backward's start) and
    issued where piece j-1 was needed. None without a backward start or an all-gather before it."""
    if chain.backward is None or pieces < 2:
        return None
    first = next(
        (k for k, link in enumerate(chain.links) if link.kind == "all_gather" and link.need < chain.backward),
        None,
    )
    if first is None:
        return None
    whole = chain.links[first]
    span = chain.backward - whole.need
    needs = [whole.need + span * j // pieces for j in range(pieces)]
    parts = [
        Link("all_gather", whole.issue if j == 0 else needs[j - 1], needs[j], whole.own_ns // pieces)
        for j in range(pieces)
    ]
    rest = [link for k, link in enumerate(chain.links) if k != first]
    return replace(chain, links=tuple(sorted(rest + parts, key=lambda link: (link.issue, link.need))))


@dataclass(frozen=True)
class OverlapFix:
    """A fix replayed on every rank: its name, what it assumes, and how to build its chain from the measured
    one (None where it does not apply to that step)."""

    name: str
    assumes: str
    apply: Callable[[Chain], Chain | None]


def overlap_fixes(
    kinds_exposed: set[str], *, fsdp_units: int | None, fsdp_blocks: int | None, reduce_pieces: int | None
) -> list[OverlapFix]:
    """The fixes that apply to what was exposed, in the job's configuration: prefetching all-gathers where
    FSDP has several units; splitting a single unit into its blocks; issuing gradient reductions through
    the backward pass."""
    out = []
    if "all_gather" in kinds_exposed and (fsdp_units is None or fsdp_units > 1):
        out.append(
            OverlapFix(
                "prefetch",
                "each all-gather issued where the collective before it was needed: one block further ahead",
                prefetch,
            )
        )
    if fsdp_units == 1 and fsdp_blocks and fsdp_blocks > 1:
        pieces = fsdp_blocks

        def per_block(chain: Chain) -> Chain | None:
            gathered = split_gather(chain, pieces) or chain
            return spread(gathered, pieces) or (gathered if gathered is not chain else None)

        out.append(
            OverlapFix(
                "per_block",
                f"the one FSDP unit cut into its {pieces} parameter-holding blocks: each all-gather "
                "needed an even share of the forward later, each reduce-scatter issued as the backward "
                "reaches its block, each gathered once a step as the one unit was; a piece costs its share "
                "of the transfer with no fixed cost per collective",
                per_block,
            )
        )
    if kinds_exposed & set(GRADIENT_REDUCTIONS) and fsdp_units is None:
        out.append(
            OverlapFix(
                "spread",
                "gradient reductions issued through the backward pass as their gradients become ready, "
                f"evenly over its progress{f', in {reduce_pieces} buckets' if reduce_pieces else ''}",
                lambda chain: spread(chain, reduce_pieces),
            )
        )
    return out


def replay_fixes(steps_by_rank: dict[int, list[StepCollectives]], fixes: list[OverlapFix]) -> dict:
    """Each fix replayed on every rank's steps. The job moves at its slowest rank's pace, so its step is the
    largest of the ranks' mean steps, measured and replayed; a fix's saving is the difference. A fix that
    applies to no step of a rank leaves that rank's steps as measured."""
    chains = {rank: [chain_of(step) for step in steps] for rank, steps in steps_by_rank.items() if steps}
    if not chains:
        return {}
    measured = {rank: float(np.mean([simulate(c) for c in cs])) / NS_PER_MS for rank, cs in chains.items()}
    job_ms = max(measured.values())
    out: dict = {"measured_step_ms": round(job_ms, 4), "fixes": {}}
    for fix in fixes:
        replayed = {}
        for rank, cs in chains.items():
            steps_ns = [simulate(fix.apply(c) or c) for c in cs]
            replayed[rank] = float(np.mean(steps_ns)) / NS_PER_MS
        step_ms = max(replayed.values())
        out["fixes"][fix.name] = {
            "step_ms": round(step_ms, 4),
            "saving_ms": round(max(0.0, job_ms - step_ms), 4),
            "assumes": fix.assumes,
            "step_ms_by_rank": {str(r): round(ms, 4) for r, ms in replayed.items()},
        }
    if out["fixes"]:
        out["best"] = max(out["fixes"], key=lambda name: out["fixes"][name]["saving_ms"])
    return out


# DDP's default bucket_cap_mb: the bucket size a single all-reduce would be cut into.
DDP_DEFAULT_BUCKET_MB = 25.0


def _mean_over_ranks(per_rank: dict[int, dict], kind: str, key: str) -> float | None:
    values = [per_rank[r].get(kind, {}).get(key, 0.0) for r in per_rank]
    return None if any(v is None for v in values) else round(float(np.mean(values)), 4)


def job_overlap(
    steps_by_rank: dict[int, list[StepCollectives]],
    *,
    fsdp2: dict | None,
    ddp_bucket_cap_mb: float | None,
    ddp_param_mb: float | None,
) -> dict:
    """The job's collectives block: exposure per collective kind (mean over ranks, per step) and the replay of
    the overlap fixes that apply to this job's configuration."""
    per_rank = {rank: exposed_by_collective_ms(steps) for rank, steps in steps_by_rank.items()}
    kinds = sorted({kind for figures in per_rank.values() for kind in figures})
    by_kind = {
        kind: {
            key: _mean_over_ranks(per_rank, kind, key)
            for key in ("comm_ms", "exposed_ms", "exposed_in_backward_ms", "per_step")
        }
        for kind in kinds
    }
    exposed = {kind for kind, figures in by_kind.items() if (figures["exposed_ms"] or 0.0) > 0}
    one_bucket = bool(ddp_bucket_cap_mb and ddp_param_mb and ddp_bucket_cap_mb >= ddp_param_mb)
    reduce_pieces = math.ceil(ddp_param_mb / DDP_DEFAULT_BUCKET_MB) if one_bucket and ddp_param_mb else None
    fixes = overlap_fixes(
        exposed,
        fsdp_units=(fsdp2 or {}).get("units_with_params"),
        fsdp_blocks=(fsdp2 or {}).get("root_leaf_modules"),
        reduce_pieces=reduce_pieces,
    )
    return {
        "by_collective": by_kind,
        "backward_seen": all(s.backward_ns is not None for steps in steps_by_rank.values() for s in steps),
        "replay": replay_fixes(steps_by_rank, fixes),
    }


def overlap_metrics(collectives: dict, source: str) -> dict[str, dict]:
    """Job metrics from the collectives block: exposed time per collective kind (`source`: the timeline's),
    and the best overlap fix's replayed saving (estimated)."""
    out = {}
    for kind, figures in collectives.get("by_collective", {}).items():
        out[f"exposed_{kind}_ms"] = Metric(figures["exposed_ms"], "ms", source).to_dict()
        if figures.get("exposed_in_backward_ms") is not None:
            out[f"exposed_{kind}_backward_ms"] = Metric(
                figures["exposed_in_backward_ms"], "ms", source
            ).to_dict()
    replay = collectives.get("replay") or {}
    best = replay.get("best")
    if best is not None:
        out["overlap_replay_saving_ms"] = Metric(
            replay["fixes"][best]["saving_ms"], "ms", ESTIMATED
        ).to_dict()
        out["overlap_replay_fix"] = Metric(best, "fix", ESTIMATED).to_dict()
    return out
