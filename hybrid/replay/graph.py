"""Build the replay graph of a Profile's measured steps from its nsys frames.

The graph holds two event lists, both in measured order:

- host events: every CUDA API call of the process (launches, copies, memsets, syncs, event records,
  stream waits) plus a zero-length marker at each step's start and end. Each event follows the
  host event that last *finished* before it started (on any thread: PyTorch hands the step from
  the main thread to autograd's device thread and back, so a thread's own previous call is not
  what it waited for), after the measured host gap. A call that waited for the device (a sync, a
  blocking copy, a launch stalled on a full queue) keeps its own cost and waits for what it waited
  for: a stream, the whole device, or one device operation.
- device ops: kernels, copies and memsets, each issued by its host call. An op starts when the
  last of three things allows: its launch (the call's start plus the launch latency), the end of
  the op before it on its stream, and the end of an op on another stream that it was seen to wait
  for (an event wait, inferred from the timeline: the op started right after that op ended, later
  than its launch and its stream allowed).

Every constraint keeps its measured gap where it bound and a typical one (never longer than the
measured slack) where it did not, so the baseline replay reproduces the measured timeline; what a
fix changes (a kernel's duration, a host gap, a sync) then moves everything downstream of it.
Dependency inference from the trace follows Daydream (Zhu et al., ATC 2020) and dPRO (Hu et al.,
MLSys 2022); the code is ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from hybrid.analysis.steps import step_bounds
from hybrid.profile import Profile

# Host event kinds.
CALL, STEP_START, STEP_END = 0, 1, 2
# What a host call waits for before it returns.
WAIT_NONE, WAIT_OP, WAIT_STREAM, WAIT_DEVICE = 0, 1, 2, 3
# Device op kinds.
KERNEL, MEMCPY, MEMSET = 0, 1, 2

# A constraint within this of the measured start is taken to have bound it (CUPTI timestamps of
# back-to-back kernels on one stream are 0.5-2 us apart on the H200).
BIND_SLACK_NS = 2_000
# An op held back past its launch and its stream waited for the op on another stream that ended
# last before it started, if that was at most this long before (event waits resolve in 5-30 us on
# the H200: resnet50's cuDNN side streams start 25 us after the main stream's batch-norm kernel).
CROSS_STREAM_MAX_NS = 1_000_000
# A host call that returned this soon after a device op ended, and took far longer than the same
# API usually does, waited for that op (a launch on a full queue, cudaFree, a pageable copy).
WAKE_MAX_NS = 50_000
LONG_CALL_FACTOR = 5.0
LONG_CALL_MIN_NS = 20_000
# How far back a stalled call's awaited op is looked for: the ops still queued when it was issued
# (CUDA queues about a thousand launches per context before a launch blocks).
LOOKBACK_OPS = 4096
# Typical figures when an export has too few samples to measure them.
# (8 us from call start to kernel start: the median on the H200 captures of launch-bound scripts.)
DEFAULT_LAUNCH_LATENCY_NS = 8_000
DEFAULT_STREAM_GAP_NS = 1_000

SYNC_WORDS = (("Stream", WAIT_STREAM), ("Device", WAIT_DEVICE), ("Ctx", WAIT_DEVICE), ("Event", WAIT_OP))
COPY_PREFIXES = ("cudaMemcpy", "cuMemcpy")


class ReplayUnavailable(Exception):
    """The Profile lacks what the replay needs; the message says what, for the report."""


@dataclass
class ReplayGraph:
    """Arrays, one entry per host event (h_*) or device op (d_*); times in ns, floats so a fix can
    scale them. `measured_step_ms` is each step's measured window, the same way the replay's is taken."""

    origin_ns: float
    h_kind: np.ndarray
    h_start: np.ndarray  # measured, for reference and fixes that locate host work
    h_end: np.ndarray
    h_api: np.ndarray  # code of each event's API name in api_names (-1 for markers)
    api_names: np.ndarray
    h_thread: np.ndarray
    h_step: np.ndarray
    h_pred: np.ndarray
    h_gap: np.ndarray
    h_cost: np.ndarray
    h_wait: np.ndarray
    h_wait_op: np.ndarray
    h_wait_stream: np.ndarray
    h_wake: np.ndarray
    h_op: np.ndarray
    d_host: np.ndarray
    d_kind: np.ndarray
    d_stream: np.ndarray
    d_dur: np.ndarray
    d_lat: np.ndarray
    d_sgap: np.ndarray
    d_dep: np.ndarray
    d_dgap: np.ndarray
    d_step: np.ndarray
    d_name: np.ndarray  # kernel name, "memcpy HtoD", "memset"
    d_bytes: np.ndarray
    d_pinned: np.ndarray  # copies: True pinned, False pageable, None unknown/not a copy
    d_start: np.ndarray  # measured
    d_end: np.ndarray
    step_ids: np.ndarray
    step_start_event: np.ndarray
    step_end_event: np.ndarray
    n_streams: int
    launch_latency_ns: float
    stream_gap_ns: float
    measured_step_ns: np.ndarray = field(default_factory=lambda: np.empty(0))
    notes: list[str] = field(default_factory=list)

    @property
    def n_host(self) -> int:
        return len(self.h_kind)

    @property
    def n_ops(self) -> int:
        return len(self.d_kind)

    def calls_named(self, *words: str) -> np.ndarray:
        """Which host events are calls whose API name contains one of `words`."""
        hit = np.array([any(w in name for w in words) for name in self.api_names], bool)
        return hit[self.h_api] & (self.h_kind == CALL)

    def copy(self, **changes) -> ReplayGraph:
        """A copy whose arrays a fix may change in place (the ones not named are shared)."""
        arrays = {name: getattr(self, name).copy() for name in changes.pop("copy_arrays", ())}
        return replace(self, **arrays, **changes)


def _device_ops(profile: Profile, step_ids: np.ndarray) -> pd.DataFrame:
    """Kernels, copies and memsets of the given steps, as one frame."""
    frames = []
    k = profile.kernels[profile.kernels["step"].isin(step_ids)]
    if len(k):
        frames.append(
            pd.DataFrame(
                {
                    "kind": KERNEL,
                    "start_ns": k["start_ns"].to_numpy(np.int64),
                    "end_ns": k["end_ns"].to_numpy(np.int64),
                    "stream": k["stream"].to_numpy(np.int64),
                    "correlation": k["correlation"].to_numpy(np.int64),
                    "step": k["step"].to_numpy(np.int64),
                    "name": k["name"].astype(str).to_numpy(object),
                    "bytes": np.zeros(len(k), np.int64),
                    "pinned": np.full(len(k), None, object),
                }
            )
        )
    c = profile.memcpys[profile.memcpys["step"].isin(step_ids)]
    if len(c):
        frames.append(
            pd.DataFrame(
                {
                    "kind": MEMCPY,
                    "start_ns": c["start_ns"].to_numpy(np.int64),
                    "end_ns": c["end_ns"].to_numpy(np.int64),
                    "stream": c["stream"].to_numpy(np.int64),
                    "correlation": c["correlation"].to_numpy(np.int64),
                    "step": c["step"].to_numpy(np.int64),
                    "name": ("memcpy " + c["kind"].astype(str)).to_numpy(object),
                    "bytes": c["bytes"].to_numpy(np.int64),
                    "pinned": c["host_pinned"].to_numpy(object),
                }
            )
        )
    m = profile.memsets[profile.memsets["step"].isin(step_ids)]
    if len(m):
        frames.append(
            pd.DataFrame(
                {
                    "kind": MEMSET,
                    "start_ns": m["start_ns"].to_numpy(np.int64),
                    "end_ns": m["end_ns"].to_numpy(np.int64),
                    "stream": m["stream"].to_numpy(np.int64),
                    "correlation": m["correlation"].to_numpy(np.int64),
                    "step": m["step"].to_numpy(np.int64),
                    "name": "memset",
                    "bytes": m["bytes"].to_numpy(np.int64),
                    "pinned": np.full(len(m), None, object),
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _check(profile: Profile) -> None:
    if profile.sources.get("kernels") != "measured:nsys":
        raise ReplayUnavailable(
            "the replay needs the nsys pass's timeline (kernels, API calls); this analysis has no nsys export"
        )
    if profile.steps.empty:
        raise ReplayUnavailable("no measured steps to replay")
    if profile.api_calls.empty:
        raise ReplayUnavailable(
            "the export's profile has no CUDA API calls (Profile.api_calls is empty: "
            "an export read by an older hybrid, or CUDA API tracing was off)"
        )
    if profile.kernels.empty:
        raise ReplayUnavailable("the export holds no kernels")


def _predecessors(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each event (sorted by start), the earlier event with the latest end at or before its start."""
    n = len(start)
    order = np.argsort(end, kind="stable")
    sorted_end = end[order]
    pos = np.searchsorted(sorted_end, start, side="right") - 1
    pred = np.where(pos >= 0, order[np.clip(pos, 0, None)], -1)
    index = np.arange(n)
    # Zero-length events at the same instant can sort after the event they precede: step back.
    for i in np.flatnonzero(pred >= index):
        p = pos[i]
        while p >= 0 and order[p] >= i:
            p -= 1
        pred[i] = order[p] if p >= 0 else -1
    return pred


def _median(values: np.ndarray, default: float) -> float:
    return float(np.median(values)) if len(values) >= 3 else default


def _first_steps(profile: Profile, steps: pd.DataFrame, max_kernels: int) -> pd.DataFrame:
    """The leading steps holding at most `max_kernels` kernels between them (two at least)."""
    per_step = profile.kernels["step"].value_counts().reindex(steps["step"]).fillna(0).to_numpy()
    keep = max(2, int(np.searchsorted(np.cumsum(per_step), max_kernels, side="right")))
    return steps.iloc[:keep]


def build_graph(profile: Profile, max_kernels: int | None = None) -> ReplayGraph:
    """The replay graph of the measured steps, all of them or the leading ones that hold at most
    `max_kernels` kernels (ReplayUnavailable when the Profile cannot give one)."""
    _check(profile)
    steps = profile.steps.sort_values("start_ns").reset_index(drop=True)
    notes = []
    if max_kernels is not None and len(profile.kernels) > max_kernels:
        kept = _first_steps(profile, steps, max_kernels)
        if len(kept) < len(steps):
            notes.append(
                f"the first {len(kept)} of {len(steps)} steps are replayed (at most {max_kernels} kernels)"
            )
            steps = kept.reset_index(drop=True)
    window = (int(steps["start_ns"].min()), int(steps["end_ns"].max()))
    calls = profile.api_calls
    calls = calls[(calls["start_ns"] >= window[0]) & (calls["start_ns"] <= window[1])]
    # One process: the one that issued most calls in the steps (its step ranges are the ones replayed).
    pids = calls["global_tid"].to_numpy(np.int64) >> 24
    main_pid = np.bincount(pids - pids.min()).argmax() + pids.min() if len(pids) else 0
    calls = calls[pids == main_pid].reset_index(drop=True)
    ops = _device_ops(profile, steps["step"].to_numpy())
    call_row = pd.Series(np.arange(len(calls)), index=calls["correlation"].to_numpy())
    call_row = call_row[~call_row.index.duplicated()]
    ops["call"] = ops["correlation"].map(call_row).fillna(-1).astype(np.int64)
    ops = ops[(ops["call"] >= 0) & ops["step"].isin(steps["step"]).to_numpy()].reset_index(drop=True)

    # Host events: calls, then markers (a marker at the same instant as a call sorts after it).
    n_calls, n_steps = len(calls), len(steps)
    marker_times = np.empty(2 * n_steps, np.int64)
    marker_times[0::2] = steps["start_ns"].to_numpy(np.int64)
    marker_times[1::2] = steps["end_ns"].to_numpy(np.int64)
    kinds = np.concatenate([np.full(n_calls, CALL), np.tile([STEP_START, STEP_END], n_steps)])
    start = np.concatenate([calls["start_ns"].to_numpy(np.int64), marker_times])
    end = np.concatenate([calls["end_ns"].to_numpy(np.int64), marker_times])
    # Order: start, then end markers of a step before the next step's start marker at the same time.
    tie = np.concatenate([np.zeros(n_calls), np.tile([1, 0], n_steps)])
    order = np.lexsort((tie, start))
    source = np.concatenate([np.arange(n_calls), np.repeat(np.arange(n_steps), 2)])[order]
    kinds, start, end = kinds[order], start[order], end[order]
    is_call = kinds == CALL
    n = len(kinds)
    event_of_call = np.empty(n_calls, np.int64)
    event_of_call[source[is_call]] = np.flatnonzero(is_call)
    api_categories = calls["api"].astype("category")
    api_names = np.array([str(c) for c in api_categories.cat.categories] + [""], dtype=object)
    api = np.full(n, len(api_names) - 1, np.int64)  # markers: the "" name
    api[is_call] = api_categories.cat.codes.to_numpy(np.int64)[source[is_call]]
    thread = np.full(n, -1, np.int64)
    thread[is_call] = calls["global_tid"].to_numpy(np.int64)[source[is_call]]
    h_step = np.full(n, -1, np.int64)
    h_step[is_call] = calls["step"].to_numpy(np.int64)[source[is_call]]
    h_step[~is_call] = steps["step"].to_numpy(np.int64)[source[~is_call]]
    step_start_event = np.flatnonzero(kinds == STEP_START)
    step_end_event = np.flatnonzero(kinds == STEP_END)

    pred = _predecessors(start, end)
    origin = float(window[0])
    prev_end = np.where(pred >= 0, end[np.clip(pred, 0, None)], window[0])
    gap = (start - prev_end).astype(float)

    # Device ops in issue order (their host call's position).
    ops["host"] = event_of_call[ops["call"].to_numpy()]
    ops = ops.sort_values(["host", "start_ns"], kind="stable").reset_index(drop=True)
    d_host = ops["host"].to_numpy(np.int64)
    d_start = ops["start_ns"].to_numpy(np.int64)
    d_end = ops["end_ns"].to_numpy(np.int64)
    stream_ids, d_stream = np.unique(ops["stream"].to_numpy(np.int64), return_inverse=True)
    n_ops = len(ops)
    h_op = np.full(n, -1, np.int64)
    h_op[d_host] = np.arange(n_ops)
    launch_start = start[d_host]

    # Stream predecessors (issue order is stream order).
    prev_on_stream = np.full(n_ops, -1, np.int64)
    for s in range(len(stream_ids)):
        idx = np.flatnonzero(d_stream == s)
        prev_on_stream[idx[1:]] = idx[:-1]
    has_prev = prev_on_stream >= 0
    stream_slack = np.where(
        has_prev, d_start - d_end[np.clip(prev_on_stream, 0, None)], np.iinfo(np.int64).max
    )
    launch_slack = d_start - launch_start
    # The launch latency shows only where nothing else could hold an op back: the whole device had
    # finished everything issued before it when its call started.
    busy_until = np.concatenate([[-np.inf], np.maximum.accumulate(d_end)[:-1]]) if n_ops else np.empty(0)
    device_idle = (busy_until < launch_start) & (launch_slack >= 0) & (ops["kind"].to_numpy() == KERNEL)
    launch_latency = _median(launch_slack[device_idle], DEFAULT_LAUNCH_LATENCY_NS)
    # The gap between back-to-back ops shows where an op was queued well before its predecessor ended.
    prev_end_ns = np.where(has_prev, d_end[np.clip(prev_on_stream, 0, None)], 0)
    queued = has_prev & (launch_start + launch_latency < prev_end_ns - BIND_SLACK_NS) & (stream_slack >= 0)
    stream_gap = _median(stream_slack[queued], DEFAULT_STREAM_GAP_NS)

    r_launch = launch_start + launch_latency
    r_stream = np.where(has_prev, d_end[np.clip(prev_on_stream, 0, None)] + stream_gap, -np.inf)
    explained = d_start <= np.maximum(r_launch, r_stream) + BIND_SLACK_NS
    d_dep = np.full(n_ops, -1, np.int64)
    d_dgap = np.zeros(n_ops)
    if len(stream_ids) > 1:
        _cross_stream_deps(
            np.flatnonzero(~explained), d_stream, d_start, d_end, len(stream_ids), d_dep, d_dgap
        )
    # The constraint that bound an op is the one that allowed it last (closest below its start): it
    # keeps the measured gap. An op held back longer than any constraint explains (a wait nothing in
    # the export records) is tied to the latest of them, so it still moves with what it follows.
    c_dep = np.where(d_dep >= 0, d_end[np.clip(d_dep, 0, None)], -np.inf)
    binding = np.argmax(np.stack([r_launch, r_stream, c_dep]), axis=0)
    launch_binds, stream_binds = binding == 0, binding == 1
    d_dep[binding != 2] = -1
    has_dep = d_dep >= 0
    d_lat = np.where(launch_binds, launch_slack, np.minimum(launch_latency, launch_slack)).astype(float)
    d_sgap = np.where(
        stream_binds, stream_slack, np.minimum(stream_gap, np.where(has_prev, stream_slack, 0))
    ).astype(float)
    if has_dep.any():
        notes.append(f"{int(has_dep.sum())} cross-stream waits inferred from the timeline")

    h_wait, h_wait_op, h_wait_stream, h_wake, h_cost = _host_waits(
        api,
        api_names,
        kinds,
        start,
        end,
        h_op,
        d_host,
        d_stream,
        d_end,
        stream_ids,
        calls["sync_stream"].to_numpy(np.int64),
        source,
        is_call,
        ops["kind"].to_numpy(),
        ops["pinned"].to_numpy(),
    )
    stream_syncs = is_call & (np.array([_sync_kind(str(name)) for name in api_names])[api] == WAIT_STREAM)
    named_stream = np.full(n, -1, np.int64)
    named_stream[is_call] = calls["sync_stream"].to_numpy(np.int64)[source[is_call]]
    unnamed = int((stream_syncs & (named_stream < 0)).sum())
    if unnamed:
        notes.append(
            f"{unnamed} stream synchronizations have no synchronization record naming their stream "
            "(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION); they are replayed as waits for the whole device"
        )

    graph = ReplayGraph(
        origin_ns=origin,
        h_kind=kinds,
        h_start=start.astype(float),
        h_end=end.astype(float),
        h_api=api,
        api_names=api_names,
        h_thread=thread,
        h_step=h_step,
        h_pred=pred,
        h_gap=gap,
        h_cost=h_cost,
        h_wait=h_wait,
        h_wait_op=h_wait_op,
        h_wait_stream=h_wait_stream,
        h_wake=h_wake,
        h_op=h_op,
        d_host=d_host,
        d_kind=ops["kind"].to_numpy(np.int64),
        d_stream=d_stream.astype(np.int64),
        d_dur=(d_end - d_start).astype(float),
        d_lat=d_lat,
        d_sgap=d_sgap,
        d_dep=d_dep,
        d_dgap=d_dgap,
        d_step=ops["step"].to_numpy(np.int64),
        d_name=ops["name"].to_numpy(object),
        d_bytes=ops["bytes"].to_numpy(np.int64),
        d_pinned=ops["pinned"].to_numpy(object),
        d_start=d_start.astype(float),
        d_end=d_end.astype(float),
        step_ids=steps["step"].to_numpy(np.int64),
        step_start_event=step_start_event,
        step_end_event=step_end_event,
        n_streams=len(stream_ids),
        launch_latency_ns=launch_latency,
        stream_gap_ns=stream_gap,
        notes=notes,
    )
    graph.measured_step_ns = step_windows(graph, graph.h_start, graph.d_end)
    return graph


def step_windows(graph: ReplayGraph, h_start: np.ndarray, d_end: np.ndarray) -> np.ndarray:
    """Each step's duration, its window taken as the measured steps' are (hybrid.analysis.steps.step_bounds)
    from the graph's host events `h_start` and device ends `d_end`, measured or replayed."""
    host_start = h_start[graph.step_start_event]
    host_end = h_start[graph.step_end_event]
    device_end = np.full(len(graph.step_ids), -np.inf)
    if len(d_end):
        position = np.searchsorted(graph.step_ids, graph.d_step)
        inside = (position < len(graph.step_ids)) & (
            graph.step_ids[np.clip(position, 0, len(graph.step_ids) - 1)] == graph.d_step
        )
        np.maximum.at(device_end, position[inside], d_end[inside])
    starts, ends = step_bounds(host_start, host_end, device_end)
    return ends - starts


def _cross_stream_deps(
    unexplained: np.ndarray,
    d_stream: np.ndarray,
    d_start: np.ndarray,
    d_end: np.ndarray,
    n_streams: int,
    d_dep: np.ndarray,
    d_dgap: np.ndarray,
) -> None:
    """For ops that started later than their launch and stream allow, the op on another stream,
    issued earlier, whose end came just before."""
    per_stream = [np.flatnonzero(d_stream == s) for s in range(n_streams)]
    # Within a stream ends grow with issue order, so the latest end at or before t is a search away.
    ends = [d_end[idx] for idx in per_stream]
    for i in unexplained:
        best, best_end = -1, -np.inf
        for s in range(n_streams):
            if s == d_stream[i]:
                continue
            pos = int(np.searchsorted(ends[s], d_start[i], side="right")) - 1
            while pos >= 0 and per_stream[s][pos] > i:
                pos -= 1
            if pos >= 0 and ends[s][pos] > best_end:
                best, best_end = int(per_stream[s][pos]), float(ends[s][pos])
        if best >= 0 and d_start[i] - best_end <= CROSS_STREAM_MAX_NS:
            d_dep[i], d_dgap[i] = best, d_start[i] - best_end


def _sync_kind(name: str) -> int:
    """What a synchronization API waits for (WAIT_NONE for any other call)."""
    if "Synchronize" not in name:
        return WAIT_NONE
    return next((k for word, k in SYNC_WORDS if word in name), WAIT_DEVICE)


def _host_waits(
    api_code,
    names,
    kinds,
    start,
    end,
    h_op,
    d_host,
    d_stream,
    d_end,
    stream_ids,
    sync_stream,
    source,
    is_call,
    d_kind,
    d_pinned,
):
    """What each host call waited for, with its own cost and its wake-up delay after the wait.
    Vectorized per API name: a large export has hundreds of thousands of calls and few names."""
    n = len(kinds)
    dur = (end - start).astype(float)
    wait = np.full(n, WAIT_NONE, np.int64)
    wait_op = np.full(n, -1, np.int64)
    wait_stream = np.full(n, -1, np.int64)
    awaited_end = np.full(n, -np.inf)
    call_stream = np.full(n, -1, np.int64)
    call_stream[is_call] = sync_stream[source[is_call]]
    typical = np.array(
        [np.median(dur[api_code == c]) if (api_code == c).any() else 0.0 for c in range(len(names))]
    )
    sync_of_name = np.array([_sync_kind(str(name)) for name in names], np.int64)
    sync = sync_of_name[api_code] * is_call
    # Ops issued by earlier events; the latest end among them, overall and per stream (within a
    # stream ends grow with issue order, so its last op issued before is the one it waits for).
    issued_before = np.searchsorted(d_host, np.arange(n), side="left")
    running_max = np.maximum.accumulate(d_end) if len(d_end) else d_end
    has_before = issued_before > 0

    device = (sync == WAIT_DEVICE) | ((sync == WAIT_STREAM) & (call_stream < 0))
    rows = np.flatnonzero(device & has_before)
    wait[rows], awaited_end[rows] = WAIT_DEVICE, running_max[issued_before[rows] - 1]

    stream_index = np.full(int(stream_ids.max()) + 2 if len(stream_ids) else 1, -1, np.int64)
    if len(stream_ids):
        stream_index[np.clip(stream_ids, 0, None)] = np.arange(len(stream_ids))
    named = (sync == WAIT_STREAM) & (call_stream >= 0)
    known = np.zeros(n, bool)
    known[named] = (call_stream[named] < len(stream_index)) & (
        stream_index[np.clip(call_stream[named], 0, len(stream_index) - 1)] >= 0
    )
    for s in range(len(stream_ids)):
        rows = np.flatnonzero(known & (stream_index[np.clip(call_stream, 0, len(stream_index) - 1)] == s))
        ops = np.flatnonzero(d_stream == s)
        last = np.searchsorted(ops, issued_before[rows]) - 1
        rows, last = rows[last >= 0], last[last >= 0]
        wait[rows], wait_stream[rows], awaited_end[rows] = WAIT_STREAM, s, d_end[ops[last]]

    for i in np.flatnonzero(sync == WAIT_OP):  # event syncs: the op that ended just before the call returned
        wait[i], wait_op[i], awaited_end[i] = _op_just_before(i, start, end, issued_before, d_end)

    # Calls that are no sync but waited all the same: staged copies (for their own copy) and calls
    # far longer than their API usually takes (a launch on a full queue, cudaFree).
    others = is_call & (sync == WAIT_NONE)
    own = h_op
    copies = others & (own >= 0)
    copies[copies] = d_kind[own[copies]] == MEMCPY
    for i in np.flatnonzero(copies):
        name, op = names[api_code[i]], own[i]
        staged = "Async" not in name or d_pinned[op] is not True
        # A staged (pageable) copy returns once its last chunk is handed over, which can be a little
        # before the copy ends on the device: it waited for its own copy all the same.
        if staged and d_end[op] >= start[i] and abs(end[i] - d_end[op]) <= WAKE_MAX_NS:
            wait[i], wait_op[i], awaited_end[i] = WAIT_OP, op, d_end[op]
    long_calls = (
        others
        & (wait == WAIT_NONE)
        & (dur > np.maximum(LONG_CALL_MIN_NS, LONG_CALL_FACTOR * typical[api_code]))
    )
    for i in np.flatnonzero(long_calls):
        wait[i], wait_op[i], awaited_end[i] = _op_just_before(i, start, end, issued_before, d_end, own[i])

    waited = (wait != WAIT_NONE) & (awaited_end > start)
    wait[(wait != WAIT_NONE) & ~waited] = WAIT_NONE
    # A call that waited costs what the same API costs when it does not wait (never more than measured).
    free_cost = np.array(
        [
            np.median(dur[(api_code == c) & ~waited])
            if ((api_code == c) & ~waited).any()
            else min(2_000.0, typical[c])
            for c in range(len(names))
        ]
    )
    cost = dur.copy()
    cost[waited] = np.minimum(dur[waited], free_cost[api_code[waited]])
    wake = np.zeros(n)
    wake[waited] = end[waited] - awaited_end[waited]
    return wait, wait_op, wait_stream, wake, cost


def _op_just_before(i, start, end, issued_before, d_end, own=-1):
    """(WAIT_OP, op, its end) for the op, issued before call i (or by it), that ended last within the
    call and no more than WAKE_MAX_NS before it returned; (WAIT_NONE, -1, -inf) when none did."""
    limit = issued_before[i] + (1 if own >= 0 else 0)
    first = max(0, limit - LOOKBACK_OPS)
    if limit == 0:
        return WAIT_NONE, -1, -np.inf
    ends = d_end[first:limit]
    inside = np.flatnonzero((ends >= start[i]) & (ends <= end[i] + BIND_SLACK_NS))
    if not len(inside):
        return WAIT_NONE, -1, -np.inf
    op = first + int(inside[np.argmax(ends[inside])])
    if end[i] - d_end[op] > WAKE_MAX_NS:
        return WAIT_NONE, -1, -np.inf
    return WAIT_OP, op, float(d_end[op])
