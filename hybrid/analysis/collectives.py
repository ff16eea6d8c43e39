"""Each collective of a rank's step and the part of it no compute on that rank hid: per collective, per
kind (all-gather, reduce-scatter, all-reduce, ...), and the waits the rank's compute made on them.

Exposure is HolisticTraceAnalysis's comm/comp overlap taken per collective: the time a collective is in
flight while the rank runs no compute. Where collectives overlap each other (FSDP2 runs its reduce-scatter
and the next all-gather on separate streams), an exposed instant belongs to the one in flight that ends
first: it is the one that could release the compute soonest.

A wait is an exposed stretch that a collective's end releases: compute stops, a collective ends, compute
resumes. The stretch from the stop to the latest collective end inside it is the wait; what follows that
end before compute resumes is the rank's own latency (a launch, a host step), not the collective's.
hybrid.replay.overlap replays the step from these waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pandas as pd

from hybrid.analysis.job_metrics import RankTimeline
from hybrid.numbers import NS_PER_MS
from nsight.intervals import interval_union

# Gradient reductions: their input exists only once the backward pass has made it.
GRADIENT_REDUCTIONS = ("all_reduce", "reduce_scatter")


@dataclass(frozen=True)
class StepCollectives:
    """One measured step of one rank, on the rank's own clock (int64 ns), clipped to the step window."""

    rank: int
    step: int
    start_ns: int
    end_ns: int
    # seq, collective, start_ns, end_ns, exposed_ns (no compute beside it), in start order
    comm: pd.DataFrame
    compute: np.ndarray  # merged (n, 2) compute intervals
    waits: np.ndarray  # merged (n, 2) intervals where compute waited for a collective to end
    backward_ns: int | None  # when this step's backward pass began, None where the timeline does not say

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


def _merged(frame: pd.DataFrame, lo: int, hi: int) -> np.ndarray:
    if frame.empty:
        return np.empty((0, 2), np.int64)
    starts = np.clip(frame["start_ns"].to_numpy(np.int64), lo, hi)
    ends = np.clip(frame["end_ns"].to_numpy(np.int64), lo, hi)
    keep = ends > starts
    s, e = interval_union(starts[keep], ends[keep])
    return np.column_stack([s, e]).astype(np.int64) if len(s) else np.empty((0, 2), np.int64)


def _subtract(intervals: np.ndarray, cut: np.ndarray) -> list[tuple[int, int]]:
    """Parts of merged `intervals` outside merged `cut`."""
    out: list[tuple[int, int]] = []
    j = 0
    for start, end in intervals.tolist():
        while j < len(cut) and cut[j, 1] <= start:
            j += 1
        k = j
        while start < end and k < len(cut) and cut[k, 0] < end:
            if cut[k, 0] > start:
                out.append((start, int(cut[k, 0])))
            start = max(start, int(cut[k, 1]))
            k += 1
        if start < end:
            out.append((start, end))
    return out


def _exposed_by_collective(
    starts: np.ndarray, ends: np.ndarray, exposed: list[tuple[int, int]]
) -> np.ndarray:
    """Each exposed instant to the collective in flight that ends first (ties to the earlier one)."""
    out = np.zeros(len(starts), np.int64)
    for lo, hi in exposed:
        edges = sorted({lo, hi, *[int(t) for t in np.r_[starts, ends] if lo < t < hi]})
        for a, b in pairwise(edges):
            active = np.flatnonzero((starts <= a) & (ends >= b))
            if len(active):
                out[active[np.argmin(ends[active])]] += b - a
    return out


def _waits(exposed: list[tuple[int, int]], ends: np.ndarray) -> np.ndarray:
    rows = []
    for lo, hi in exposed:
        inside = ends[(ends > lo) & (ends <= hi)]
        if len(inside):
            rows.append((lo, int(inside.max())))
    return np.array(rows, np.int64).reshape(-1, 2)


def step_windows(timeline: RankTimeline) -> list[tuple[int, int, int]]:
    """(step, start, end) of each measured step where its work ran. On the host (a CPU job) that is the step's
    own range. On a GPU the device runs behind the host: a step's kernels (those launched in its host range)
    run from the first one's start to the next step's first start, the last step to its last kernel's end
    (the H200 DDP capture's all-reduces end 0.5 ms after the host range that launched them)."""
    steps = timeline.steps.sort_values("start_ns")
    rows = [(int(r.step), int(r.start_ns), int(r.end_ns)) for r in steps.itertuples()]
    if not timeline.used_cuda:
        return rows
    work = pd.concat([timeline.comm[["step", "start_ns", "end_ns"]], timeline.compute], ignore_index=True)
    first = work.groupby("step")["start_ns"].min()
    last = work.groupby("step")["end_ns"].max()
    starts = [int(first.get(step, lo)) for step, lo, _ in rows]
    ends = [*starts[1:], max(int(last.get(rows[-1][0], rows[-1][2])), starts[-1])] if rows else []
    return [(step, lo, max(lo, hi)) for (step, _, _), lo, hi in zip(rows, starts, ends, strict=True)]


def step_collectives(timeline: RankTimeline) -> list[StepCollectives]:
    """Every measured step of one rank with its collectives' exposure and the waits on them."""
    out = []
    for step, lo, hi in step_windows(timeline):
        comm = timeline.comm[timeline.comm["step"] == step].sort_values("start_ns")
        starts = np.clip(comm["start_ns"].to_numpy(np.int64), lo, hi)
        ends = np.clip(comm["end_ns"].to_numpy(np.int64), lo, hi)
        compute = _merged(timeline.compute[timeline.compute["step"] == step], lo, hi)
        exposed = _subtract(_merged(comm, lo, hi), compute)
        frame = pd.DataFrame(
            {
                "seq": comm["seq"].to_numpy(),
                "collective": comm["collective"].to_numpy(),
                "start_ns": starts,
                "end_ns": ends,
                "exposed_ns": _exposed_by_collective(starts, ends, exposed),
            }
        )
        backward = timeline.backward_ns.get(step)
        out.append(
            StepCollectives(
                rank=timeline.rank,
                step=step,
                start_ns=lo,
                end_ns=hi,
                comm=frame,
                compute=compute,
                waits=_waits(exposed, ends),
                backward_ns=backward if backward is not None and lo <= backward <= hi else None,
            )
        )
    return out


def exposed_by_collective_ms(steps: list[StepCollectives]) -> dict[str, dict[str, float | None]]:
    """Per collective kind, per step means (ms): time in flight, exposed (no compute beside it), exposed in
    the backward pass (issued after it began; None where a step's backward start is unknown), count."""
    if not steps:
        return {}
    frame = pd.concat(
        [s.comm.assign(in_backward=s.comm["start_ns"] >= (s.backward_ns or 0)) for s in steps],
        ignore_index=True,
    )
    if frame.empty:
        return {}
    n = len(steps)
    backward_seen = all(s.backward_ns is not None for s in steps)
    frame = frame.assign(flight_ns=frame["end_ns"] - frame["start_ns"])
    grouped = frame.groupby("collective")
    return {
        str(kind): {
            "comm_ms": round(float(group["flight_ns"].sum()) / n / NS_PER_MS, 4),
            "exposed_ms": round(float(group["exposed_ns"].sum()) / n / NS_PER_MS, 4),
            "exposed_in_backward_ms": round(
                float(group.loc[group["in_backward"], "exposed_ns"].sum()) / n / NS_PER_MS, 4
            )
            if backward_seen
            else None,
            "per_step": round(len(group) / n, 3),
        }
        for kind, group in grouped
    }
