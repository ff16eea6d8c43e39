"""Replay a ReplayGraph: one pass over the host events in measured order, issuing each device op
as its launch call runs (ops only depend on earlier calls, and a call only waits for ops issued
before it or by it, so no event queue is needed: the pass is linear in the events)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid.analysis.steps import steady_mask
from hybrid.numbers import NS_PER_MS
from hybrid.replay.graph import WAIT_DEVICE, WAIT_OP, WAIT_STREAM, ReplayGraph, step_windows


@dataclass
class StepReplay:
    step_ns: np.ndarray  # replayed window of each step, in the graph's step order
    steady: np.ndarray  # which steps count in the mean (outliers excluded)
    h_start: np.ndarray
    h_end: np.ndarray
    d_start: np.ndarray
    d_end: np.ndarray

    @property
    def step_time_ms(self) -> float:
        """Mean replayed step time over the steady steps."""
        return float(self.step_ns[self.steady].mean() / NS_PER_MS) if self.steady.any() else 0.0


def replay_step(graph: ReplayGraph) -> StepReplay:
    """Replay every measured step of the graph; see StepReplay.step_time_ms for the mean."""
    n, n_ops = graph.n_host, graph.n_ops
    pred = graph.h_pred.tolist()
    gap = graph.h_gap.tolist()
    cost = graph.h_cost.tolist()
    wait = graph.h_wait.tolist()
    wait_op = graph.h_wait_op.tolist()
    wait_stream = graph.h_wait_stream.tolist()
    wake = graph.h_wake.tolist()
    h_op = graph.h_op.tolist()
    stream = graph.d_stream.tolist()
    dur = graph.d_dur.tolist()
    lat = graph.d_lat.tolist()
    sgap = graph.d_sgap.tolist()
    dep = graph.d_dep.tolist()
    dgap = graph.d_dgap.tolist()

    h_start = [0.0] * n
    h_end = [0.0] * n
    d_start = [0.0] * n_ops
    d_end = [0.0] * n_ops
    neg = -float("inf")
    stream_end = [neg] * max(graph.n_streams, 1)
    device_end = neg
    origin = graph.origin_ns
    # The hot loop (a million iterations on a large export): plain lists and `if a > b` comparisons,
    # which CPython runs several times faster than numpy scalars and max() calls.
    for i in range(n):
        p = pred[i]
        t = (h_end[p] if p >= 0 else origin) + gap[i]
        h_start[i] = t
        op = h_op[i]
        if op >= 0:
            s = stream[op]
            ready = t + lat[op]
            after_stream = stream_end[s] + sgap[op]
            if after_stream > ready:  # noqa: PLR1730
                ready = after_stream
            d = dep[op]
            if d >= 0:
                after_dep = d_end[d] + dgap[op]
                if after_dep > ready:  # noqa: PLR1730
                    ready = after_dep
            d_start[op] = ready
            finish = ready + dur[op]
            d_end[op] = finish
            stream_end[s] = finish
            if finish > device_end:  # noqa: PLR1730
                device_end = finish
        e = t + cost[i]
        w = wait[i]
        if w:
            if w == WAIT_OP:
                awaited = d_end[wait_op[i]]
            elif w == WAIT_STREAM:
                awaited = stream_end[wait_stream[i]]
            elif w == WAIT_DEVICE:
                awaited = device_end
            else:
                awaited = neg
            if awaited + wake[i] > e:  # noqa: PLR1730
                e = awaited + wake[i]
        h_end[i] = e
    h_start_a, d_end_a = np.asarray(h_start), np.asarray(d_end)
    step_ns = step_windows(graph, h_start_a, d_end_a)
    return StepReplay(
        step_ns=step_ns,
        steady=steady_mask(step_ns),
        h_start=h_start_a,
        h_end=np.asarray(h_end),
        d_start=np.asarray(d_start),
        d_end=d_end_a,
    )
