"""Job-level metrics of a multi-process (torchrun) run: each rank's communication timeline, then
what only exists between ranks (step-time spread, time waiting in collectives, the straggler).

Where communication is seen:
- NCCL: its kernels (names starting with `nccl`) in the nsys export, else in the torch trace;
  compute is every other kernel. An NCCL kernel spins from the moment its stream reaches it until
  all peers have joined, so its duration is wait + transfer.
- gloo: the `gloo:<collective>` ranges torch.profiler records on gloo's worker threads, from the
  moment the rank hands the collective over until it completes (wait + transfer again); compute is
  the CPU operators of the other threads, less the `c10d::` calls that hand collectives over.

Time waiting in collectives is matched across ranks without comparing clocks (the ranks may run on
different hosts): the k-th collective of step s is the same collective on every rank, the rank that
spent least time in it arrived last, and every other rank waited the difference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.markers import RANK_DIR_FORMAT, TORCH_STEP_NAME
from hybrid.numbers import NS_PER_MS
from hybrid.profile import Profile, is_communication, name_matches, name_starts
from hybrid.provenance import MEASURED_NSYS, MEASURED_TORCH, Metric
from nsight.intervals import covered, interval_union, step_of

RANK_DIR_PATTERN = re.compile(r"rank-(\d+)$")
GLOO_PREFIX = "gloo:"
C10D_PREFIX = "c10d::"
# Backends whose collectives hybrid can see (NCCL through its kernels, gloo through its ranges).
VISIBLE_BACKENDS = ("nccl", "gloo")
# A rank late by chance arrives last at 1/N of the collectives (half of them with two ranks); one that
# arrives last at three in four, over every measured step, is late for a reason.
STRAGGLER_MIN_ARRIVED_LAST_PCT = 75.0
# Host-side calls that only synchronize ranks: they move no data the step needs.
BARRIER_OPS = ("c10d::barrier", "gloo:barrier", "nccl:barrier")

# Collective kinds by the words their names contain (NCCL kernels: ncclDevKernel_AllReduce_Sum_f32_RING_LL;
# gloo ranges: gloo:all_reduce; NVTX/record_function: nccl:all_gather). Longest first: "reduce" is
# in "all_reduce" and "reduce_scatter".
COLLECTIVE_KINDS = (
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("sendrecv", "send_recv"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
    ("reduce", "reduce"),
)


def collective_kind(name: str) -> str:
    """`all_reduce`, `all_gather`, ... from a kernel or range name; `other` when none matches."""
    flat = re.sub(r"[^a-z]", "", name.lower().removeprefix(GLOO_PREFIX).removeprefix("nccl:"))
    flat = flat.removeprefix("nccldevkernel").removeprefix("ncclkernel")
    for word, kind in COLLECTIVE_KINDS:
        if word in flat:
            return kind
    return "other"


def find_rank_dirs(run_dir: Path) -> dict[int, Path]:
    """{rank: folder} of a job's run directory (rank-00, rank-01, ...); empty for a single process."""
    found = {}
    for child in run_dir.iterdir() if run_dir.is_dir() else ():
        match = RANK_DIR_PATTERN.match(child.name)
        if match and child.is_dir():
            found[int(match.group(1))] = child
    return dict(sorted(found.items()))


def is_job_dir(run_dir: Path) -> bool:
    return bool(find_rank_dirs(run_dir))


def rank_dir_name(rank: int) -> str:
    return RANK_DIR_FORMAT.format(rank)


# -- interval arithmetic on int64 ns -------------------------------------------------------------


def union(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Merged, sorted (n, 2) intervals covering the given ones."""
    return np.column_stack(interval_union(np.asarray(starts, np.int64), np.asarray(ends, np.int64)))


def covered_ns(intervals: np.ndarray) -> int:
    return int((intervals[:, 1] - intervals[:, 0]).sum()) if len(intervals) else 0


def uncovered_ns(intervals: np.ndarray, cover: np.ndarray) -> int:
    """Time in merged `intervals` that merged `cover` does not overlap."""
    if not len(intervals):
        return 0
    overlap = covered(cover[:, 0], cover[:, 1], intervals[:, 0], intervals[:, 1]).sum() if len(cover) else 0
    return covered_ns(intervals) - int(overlap)


# -- one rank ------------------------------------------------------------------------------------


@dataclass
class RankTimeline:
    """One rank's steps and, per step, its collectives and compute intervals (int64 ns, own clock)."""

    rank: int
    steps: pd.DataFrame  # step, start_ns, end_ns
    comm: pd.DataFrame  # step, seq, collective, name, start_ns, end_ns
    compute: pd.DataFrame  # step, start_ns, end_ns
    barriers: pd.DataFrame  # step, name, start_ns, end_ns (host-side calls that only synchronize ranks)
    source: str
    backend: str | None = None
    used_cuda: bool = False
    host_collectives_on_cuda: int = 0  # gloo collectives run by a rank that used the GPU
    warnings: list[str] = field(default_factory=list)
    # {step: ns} when each step's backward pass began (its first autograd op or kernel); absent where unseen
    backward_ns: dict[int, int] = field(default_factory=dict)


def _step_of(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Measured step whose host range holds each time, -1 for none (ranges do not overlap)."""
    return step_of(times, steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy(), steps["step"].to_numpy())


def _sequenced(comm: pd.DataFrame) -> pd.DataFrame:
    comm = comm[comm["step"] >= 0].sort_values(["step", "start_ns"]).reset_index(drop=True)
    comm["seq"] = comm.groupby("step").cumcount()
    comm["collective"] = comm["name"].map(collective_kind)
    return comm[["step", "seq", "collective", "name", "start_ns", "end_ns"]]


def _device_split(kernels: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    nccl = is_communication(kernels["name"])
    cols = ["step", "name", "start_ns", "end_ns"]
    return kernels.loc[nccl, cols].reset_index(drop=True), kernels.loc[~nccl, cols].reset_index(drop=True)


def _raw_torch_events(trace: Path) -> tuple[pd.DataFrame, dict]:
    # The torch loader keeps only cpu_op operators; gloo's ranges are user annotations, so the
    # trace's complete events are read here with the loader's own reader.
    from hybrid.load.torch_trace import _complete_events, _read_trace

    raw = _read_trace(trace)
    return _complete_events(raw["traceEvents"]), raw.get("distributedInfo") or {}


def _backend_name(info: dict) -> str | None:
    backend = info.get("backend")
    return str(backend) if backend else None


def load_rank_timeline(rank: int, folder: Path) -> RankTimeline | None:
    """The rank's timeline from its nsys export (preferred: device time) or its torch trace; None
    when the rank left neither."""
    from hybrid.rundir import RunDir

    run = RunDir(folder)
    trace, export = run.torch_trace(), run.nsys_export()
    if trace is None and export is None:
        return None
    events, info, warnings = None, {}, []
    if trace is not None:
        events, info = _raw_torch_events(trace)
    if export is not None:
        from hybrid.load.nsys_export import load_nsys_export

        profile, source = load_nsys_export(export), MEASURED_NSYS
    else:
        from hybrid.load.torch_trace import load_torch_trace

        profile, source = load_torch_trace(trace), MEASURED_TORCH
    steps = profile.steps[["step", "start_ns", "end_ns"]].reset_index(drop=True)
    comm, compute = _device_split(profile.kernels)
    used_cuda = not profile.kernels.empty
    host_collectives_on_cuda = 0
    barriers = pd.DataFrame(columns=["step", "name", "start_ns", "end_ns"])
    if events is not None:
        host_steps = _torch_steps(events)
        names = events["name"]
        gloo = events[(events["cat"] == "user_annotation").to_numpy() & name_starts(names, GLOO_PREFIX)]
        gloo = gloo.assign(step=_step_of(gloo["start_ns"].to_numpy(), host_steps))
        barrier = events[names.isin(BARRIER_OPS)]
        barriers = barrier.assign(step=_step_of(barrier["start_ns"].to_numpy(), host_steps))[
            ["step", "name", "start_ns", "end_ns"]
        ]
        if used_cuda:
            host_collectives_on_cuda = int((gloo["step"] >= 0).sum())
        elif comm.empty:
            # A CPU job: gloo carries the collectives and the host threads do the compute.
            steps = host_steps
            comm = _named_by_caller(gloo[["step", "name", "start_ns", "end_ns"]], events, steps)
            compute = _host_compute(events, gloo, steps)
    return RankTimeline(
        rank=rank,
        steps=steps,
        comm=_sequenced(comm),
        compute=compute,
        barriers=barriers,
        source=source,
        backend=_backend_name(info),
        used_cuda=used_cuda,
        host_collectives_on_cuda=host_collectives_on_cuda,
        warnings=warnings,
        backward_ns=_backward_starts(profile, steps),
    )


def _named_by_caller(gloo: pd.DataFrame, events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """gloo's ranges renamed by the `c10d::` call that handed each over, where a step's calls and ranges
    pair one to one in start order: gloo runs a reduce-scatter as an all-reduce (FSDP2's
    `c10d::_reduce_scatter_base_` shows as `gloo:all_reduce`), and the caller says which collective it is."""
    calls = events[(events["cat"] == "cpu_op").to_numpy() & name_starts(events["name"], C10D_PREFIX)]
    calls = calls[calls["name"].map(collective_kind) != "other"]
    calls = calls.assign(step=_step_of(calls["start_ns"].to_numpy(), steps))
    out = gloo.sort_values("start_ns").reset_index(drop=True)
    for step, ranges in out.groupby("step"):
        callers = calls[calls["step"] == step].sort_values("start_ns")
        if len(callers) == len(ranges):
            out.loc[ranges.index, "name"] = callers["name"].to_numpy()
    return out


def _backward_starts(profile: Profile, steps: pd.DataFrame) -> dict[int, int]:
    """When each step's backward pass began. Under nsys: the first kernel launched by a thread other than
    the one that launched the step's first kernel (PyTorch launches backward kernels from its autograd
    thread); from a torch trace: the first `autograd::engine::evaluate_function` operator (on the CPU,
    backward runs on the calling thread)."""
    kernels, calls = profile.kernels, profile.api_calls
    if len(kernels) and len(calls):
        launched = kernels.merge(calls[["correlation", "global_tid"]], on="correlation", how="inner")
        launched = launched[launched["step"] >= 0].sort_values("start_ns")
        out = {}
        for step, group in launched.groupby("step"):
            other = group[group["global_tid"] != group["global_tid"].iloc[0]]
            if len(other):
                out[int(step)] = int(other["start_ns"].iloc[0])
        return out
    ops = profile.ops
    autograd = ops[name_starts(ops["name"], "autograd::engine::evaluate_function")]
    if kernels.empty and len(autograd):
        autograd = autograd.assign(step=_step_of(autograd["start_ns"].to_numpy(), steps))
        first = autograd[autograd["step"] >= 0].groupby("step")["start_ns"].min()
        return {int(step): int(ns) for step, ns in first.items()}
    return {}


def _torch_steps(events: pd.DataFrame) -> pd.DataFrame:
    marked = events[
        (events["cat"] == "user_annotation").to_numpy() & name_matches(events["name"], TORCH_STEP_NAME)
    ]
    finished = [a.get("finished", True) is not False for a in marked["args"]]
    marked = marked[finished]
    index = marked["name"].str.extract(TORCH_STEP_NAME, expand=False)
    return pd.DataFrame(
        {
            "step": index.astype("int64").to_numpy(),
            "start_ns": marked["start_ns"].to_numpy(),
            "end_ns": marked["end_ns"].to_numpy(),
        }
    )


def _host_compute(events: pd.DataFrame, gloo: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """CPU operators outside gloo's threads, with the spans of `c10d::` hand-over calls cut out
    (they enclose waits, not compute)."""
    ops = events[(events["cat"] == "cpu_op") & ~events["tid"].isin(set(gloo["tid"]))]
    handing_over = name_starts(ops["name"], C10D_PREFIX)
    handover = ops[handing_over]
    work = ops[~handing_over]
    work = work.assign(step=_step_of(work["start_ns"].to_numpy(), steps))
    rows = []
    for step, group in work[work["step"] >= 0].groupby("step"):
        merged = union(group["start_ns"].to_numpy(), group["end_ns"].to_numpy())
        cut = union(handover["start_ns"].to_numpy(), handover["end_ns"].to_numpy())
        for start, end in _subtract(merged, cut):
            rows.append((step, start, end))
    return pd.DataFrame(rows, columns=["step", "start_ns", "end_ns"])


def _subtract(intervals: np.ndarray, cut: np.ndarray) -> list[tuple[int, int]]:
    out = []
    for start, end in intervals.tolist():
        for cut_start, cut_end in cut.tolist():
            if cut_end <= start or cut_start >= end:
                continue
            if cut_start > start:
                out.append((start, cut_start))
            start = max(start, cut_end)
            if start >= end:
                break
        if start < end:
            out.append((start, end))
    return out


# -- per-rank metrics ----------------------------------------------------------------------------


def rank_comm_metrics(timeline: RankTimeline) -> dict:
    """Per step means (ms): time in collectives, compute, exposed communication (in flight while no
    compute runs), overlap %, and time per collective kind."""
    steps = sorted(set(timeline.steps["step"].tolist()))
    comm_ns = compute_ns = exposed_ns = 0
    for step in steps:
        comm = timeline.comm[timeline.comm["step"] == step]
        compute = timeline.compute[timeline.compute["step"] == step]
        comm_cover = union(comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy())
        compute_cover = union(compute["start_ns"].to_numpy(), compute["end_ns"].to_numpy())
        comm_ns += covered_ns(comm_cover)
        compute_ns += covered_ns(compute_cover)
        exposed_ns += uncovered_ns(comm_cover, compute_cover)
    n = max(1, len(steps))
    by_kind = (
        (timeline.comm["end_ns"] - timeline.comm["start_ns"]).groupby(timeline.comm["collective"]).sum()
        / n
        / NS_PER_MS
    )
    barriers = timeline.barriers[timeline.barriers["step"] >= 0]
    return {
        "steps": len(steps),
        "comm_ms": comm_ns / n / NS_PER_MS,
        "compute_ms": compute_ns / n / NS_PER_MS,
        "exposed_comm_ms": exposed_ns / n / NS_PER_MS,
        "overlap_pct": 100.0 * (comm_ns - exposed_ns) / comm_ns if comm_ns else None,
        "collectives_per_step": len(timeline.comm) / n,
        "comm_by_collective_ms": {kind: round(float(ms), 4) for kind, ms in by_kind.items()},
        "barriers_per_step": len(barriers) / n,
        "barrier_ms": float((barriers["end_ns"] - barriers["start_ns"]).sum()) / n / NS_PER_MS,
    }


# -- across ranks --------------------------------------------------------------------------------


def collective_waits(timelines: list[RankTimeline]) -> tuple[pd.DataFrame, list[str]]:
    """One row per collective every rank ran (same step, same place in the step, same kind):
    step, seq, collective, and per rank `d<r>` its duration and `w<r>` the time it waited (its
    duration minus the shortest). Collectives that do not line up are left out, with a warning."""
    warnings: list[str] = []
    if len(timelines) < 2:
        return pd.DataFrame(), warnings
    keyed = [t.comm.set_index(["step", "seq"]) for t in timelines]
    counts = pd.DataFrame({t.rank: t.comm.groupby("step").size() for t in timelines}).fillna(0).astype(int)
    uneven = counts[counts.nunique(axis=1) > 1]
    if len(uneven):
        detail = "; ".join(
            f"step {step}: " + ", ".join(f"rank {r} {n}" for r, n in row.items())
            for step, row in uneven.head(3).iterrows()
        )
        warnings.append(
            f"ranks ran different numbers of collectives in {len(uneven)} step(s) ({detail}); "
            "those steps are left out of the wait and straggler figures"
        )
    common = keyed[0].index
    for frame in keyed[1:]:
        common = common.intersection(frame.index)
    common = [key for key in common if key[0] not in set(uneven.index)]
    if not common:
        return pd.DataFrame(), warnings
    table = pd.DataFrame(index=pd.MultiIndex.from_tuples(sorted(common), names=["step", "seq"]))
    kinds = pd.DataFrame(
        {t.rank: frame.loc[table.index, "collective"] for t, frame in zip(timelines, keyed, strict=False)}
    )
    mismatched = kinds.nunique(axis=1) > 1
    if mismatched.any():
        warnings.append(
            f"{int(mismatched.sum())} collective(s) differ in kind across ranks at the same place "
            "in a step (ranks took different code paths); they are left out"
        )
    table = table[~mismatched.to_numpy()]
    table["collective"] = kinds.loc[table.index].iloc[:, 0]
    for timeline, frame in zip(timelines, keyed, strict=False):
        rows = frame.loc[table.index]
        table[f"d{timeline.rank}"] = (rows["end_ns"] - rows["start_ns"]).to_numpy()
    durations = table[[f"d{t.rank}" for t in timelines]]
    shortest = durations.min(axis=1)
    for timeline in timelines:
        table[f"w{timeline.rank}"] = table[f"d{timeline.rank}"] - shortest
    return table.reset_index(), warnings


def waits_ms(waits: pd.DataFrame, ranks: list[int]) -> dict[int, float]:
    """Time each rank waits in collectives, per step (ms)."""
    if waits.empty:
        return {}
    steps = max(1, waits["step"].nunique())
    return {r: float(waits[f"w{r}"].sum()) / steps / NS_PER_MS for r in ranks}


def straggler(waits: pd.DataFrame, ranks: list[int]) -> dict | None:
    """The rank the others wait for: it waits least itself and arrives last at most collectives
    (STRAGGLER_MIN_ARRIVED_LAST_PCT); None when no rank does. `lateness_ms` is how much longer, per
    step, the other ranks wait in collectives than it does."""
    if waits.empty or len(ranks) < 2:
        return None
    wait_ms = waits_ms(waits, ranks)
    last = min(ranks, key=lambda r: (wait_ms[r], r))
    others = [wait_ms[r] for r in ranks if r != last]
    arrived_last = np.array(ranks)[waits[[f"w{r}" for r in ranks]].to_numpy().argmin(axis=1)]
    arrived_last_pct = 100.0 * float(np.mean(arrived_last == last))
    if arrived_last_pct < STRAGGLER_MIN_ARRIVED_LAST_PCT:
        return None
    steps = max(1, waits["step"].nunique())
    peers = [f"w{r}" for r in ranks if r != last]
    at = waits.groupby("collective")[peers].sum().mean(axis=1) / steps / NS_PER_MS
    return {
        "rank": last,
        "lateness_ms": float(np.mean(others)) - wait_ms[last],
        "arrived_last_pct": arrived_last_pct,
        "wait_ms_by_rank": {str(r): ms for r, ms in wait_ms.items()},  # str keys, as in results.json
        # Where the others wait for it: per collective kind, their mean wait a step.
        "others_wait_ms_by_collective": {str(kind): round(float(ms), 4) for kind, ms in at.items()},
    }


# A straggler whose extra compute covers at least half its lateness is late for its work; one whose compute
# matches its peers' is late for time spent outside compute (host work, input, a sleep).
STRAGGLER_COMPUTE_SHARE = 0.5


def straggler_cause(late: dict, per_rank: dict[int, dict]) -> dict:
    """Why the straggler is late, from the ranks' own figures: its compute per step beyond its peers' mean,
    and whether that covers its lateness (`more_compute`) or not (`outside_compute`)."""
    rank = late["rank"]
    peers = [m["compute_ms"] for r, m in per_rank.items() if r != rank]
    extra = per_rank[rank]["compute_ms"] - float(np.mean(peers)) if peers else 0.0
    more = extra >= STRAGGLER_COMPUTE_SHARE * late["lateness_ms"]
    return {"extra_compute_ms": round(extra, 4), "cause": "more_compute" if more else "outside_compute"}


def _metric(value, unit: str, source: str) -> dict:
    return Metric(
        None if value is None else (round(value, 4) if isinstance(value, float) else value), unit, source
    ).to_dict()


def job_block(timelines: list[RankTimeline], rank_results: dict[int, dict]) -> tuple[dict, list[str]]:
    """The `job` block of the job's results.json, and warnings about what could not be matched."""
    ranks = [t.rank for t in timelines]
    per_rank = {t.rank: rank_comm_metrics(t) for t in timelines}
    waits, warnings = collective_waits(timelines)
    late = straggler(waits, ranks)
    rank_waits = waits_ms(waits, ranks)
    sources = {t.source for t in timelines}
    source = MEASURED_NSYS if sources == {MEASURED_NSYS} else MEASURED_TORCH
    step_ms = {r: (rank_results.get(r, {}).get("timing") or {}).get("step_time_ms") for r in rank_results}
    known = {r: v for r, v in step_ms.items() if v is not None}
    for rank, metrics in per_rank.items():
        metrics["step_time_ms"] = step_ms.get(rank)
        metrics["wait_ms"] = rank_waits.get(rank)
    job_step = max(known.values()) if known else None
    slowest = max(known, key=known.get) if known else None

    def mean(key: str) -> float | None:
        values = [m[key] for m in per_rank.values() if m.get(key) is not None]
        return float(np.mean(values)) if values else None

    metrics = {
        "step_time_ms": _metric(job_step, "ms", source),
        "step_time_spread_ms": _metric(
            max(known.values()) - min(known.values()) if known else None, "ms", source
        ),
        "step_time_spread_pct": _metric(
            100.0 * (max(known.values()) - min(known.values())) / job_step if job_step else None, "%", source
        ),
        "compute_ms": _metric(mean("compute_ms"), "ms", source),
        "comm_ms": _metric(mean("comm_ms"), "ms", source),
        "exposed_comm_ms": _metric(mean("exposed_comm_ms"), "ms", source),
        "overlap_pct": _metric(mean("overlap_pct"), "%", source),
        "wait_ms": _metric(mean("wait_ms"), "ms", source),
        "barrier_ms": _metric(mean("barrier_ms"), "ms", source),
        "barriers_per_step": _metric(mean("barriers_per_step"), "count", source),
        "host_collectives_on_cuda_per_step": _metric(
            float(
                np.mean([t.host_collectives_on_cuda / max(1, per_rank[t.rank]["steps"]) for t in timelines])
            ),
            "count",
            MEASURED_TORCH,
        ),
    }
    if late is not None:
        late.update(straggler_cause(late, per_rank))
        at = late["others_wait_ms_by_collective"]
        metrics["straggler_extra_compute_ms"] = _metric(late["extra_compute_ms"], "ms", source)
        metrics["straggler_cause"] = _metric(late["cause"], "cause", source)
        if at:
            metrics["straggler_waited_at"] = _metric(max(at, key=lambda kind: at[kind]), "collective", source)
        metrics["straggler_rank"] = _metric(late["rank"], "rank", source)
        metrics["straggler_lateness_ms"] = _metric(late["lateness_ms"], "ms", source)
        metrics["straggler_arrived_last_pct"] = _metric(late["arrived_last_pct"], "%", source)
    by_collective: dict[str, float] = {}
    for m in per_rank.values():
        for kind, ms in m["comm_by_collective_ms"].items():
            by_collective[kind] = by_collective.get(kind, 0.0) + ms / len(per_rank)
    block = {
        "ranks": ranks,
        "world_size": len(rank_results),
        "backend": next((t.backend for t in timelines if t.backend), None),
        "comm_source": source,
        "slowest_rank": slowest,
        "straggler": late,
        "collectives_matched": len(waits),
        "comm_by_collective_ms": {
            k: round(v, 4) for k, v in sorted(by_collective.items(), key=lambda kv: -kv[1])
        },
        "metrics": metrics,
        "per_rank": {
            str(r): {k: (round(v, 4) if isinstance(v, float) else v) for k, v in m.items()}
            for r, m in per_rank.items()
        },
    }
    return block, warnings
