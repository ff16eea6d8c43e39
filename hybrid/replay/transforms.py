"""Fixes as graph transformations: each takes a ReplayGraph and returns a changed copy (the input is
never modified), so a fix's saving is replay(graph) - replay(apply(graph, fix)) and several fixes
compose by applying them in turn."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from hybrid.ledger.idle import LAUNCH_GAP_MAX_NS
from hybrid.replay.graph import CALL, KERNEL, MEMCPY, WAIT_NONE, ReplayGraph
from hybrid.rules.base import Fix


def _in_steps(graph: ReplayGraph, values: np.ndarray) -> np.ndarray:
    return np.isin(values, graph.step_ids)


def _gemm_mask(graph: ReplayGraph, precisions: tuple[str, ...]) -> np.ndarray:
    """GEMM and convolution kernels whose math ran in one of `precisions` (hybrid.analysis.kernel_classes:
    cuDNN's
    fp32 convolution engines such as wgrad_alg0_engine and fft2d_* count as fp32 convolutions)."""
    from hybrid.analysis.kernel_classes import matmul_precision

    names = pd.Series(graph.d_name, dtype="category")
    precision = matmul_precision(names).to_numpy(object)
    return (graph.d_kind == KERNEL) & np.isin(precision, precisions) & _in_steps(graph, graph.d_step)


def faster_gemms(graph: ReplayGraph, fix: Fix) -> ReplayGraph:
    """GEMM/conv kernels of `precisions` run `speedup` times faster (TF32, bf16 autocast, aligned
    shapes); `share` (default 1) is the part of their time the fix reaches."""
    mask = _gemm_mask(graph, tuple(fix.params.get("precisions", ("fp32",))))
    factor = 1.0 - fix.params.get("share", 1.0) * (1.0 - 1.0 / fix.params["speedup"])
    out = graph.copy(copy_arrays=("d_dur",))
    out.d_dur[mask] *= factor
    return out


def faster_kernels(graph: ReplayGraph, fix: Fix) -> ReplayGraph:
    """The selected kernels lose `saved_ns_per_step` of device time per step between them, in
    proportion to their duration: the replay turns a kernel-time saving into a step-time saving."""
    mask = (graph.d_kind == KERNEL) & _in_steps(graph, graph.d_step)
    names = fix.params.get("name_pattern")
    if names:
        mask &= pd.Series(graph.d_name).astype(str).str.contains(names, regex=True).to_numpy()
    total = graph.d_dur[mask].sum() / max(len(graph.step_ids), 1)
    out = graph.copy(copy_arrays=("d_dur",))
    if total > 0:
        out.d_dur[mask] *= max(0.0, 1.0 - fix.params["saved_ns_per_step"] / total)
    return out


def _final_sync(graph: ReplayGraph) -> int:
    """The device sync the step hook issues before closing the last measured step (it is part of the
    measurement, not of the script): the last waiting sync call before the last step's end."""
    last_end = graph.step_end_event[-1]
    waits = np.flatnonzero(
        (graph.h_wait[:last_end] != WAIT_NONE) & graph.calls_named("Synchronize")[:last_end]
    )
    return int(waits[-1]) if len(waits) else -1


def no_syncs(graph: ReplayGraph, fix: Fix) -> ReplayGraph:
    """The host no longer waits in the steps' synchronizations and blocking device->host reads (the
    value is kept on the device and read every `keep_every` steps, if at all)."""
    sync = graph.calls_named("Synchronize", "Memcpy")
    mask = sync & (graph.h_wait != WAIT_NONE) & _in_steps(graph, graph.h_step)
    final = _final_sync(graph)
    if final >= 0:
        mask[final] = False
    keep_every = fix.params.get("keep_every")
    if keep_every:
        kept_steps = graph.step_ids[::keep_every]
        # One read per kept step survives: its last waiting call.
        for step in kept_steps:
            idx = np.flatnonzero(mask & (graph.h_step == step))
            if len(idx):
                mask[idx[-1]] = False
    out = graph.copy(copy_arrays=("h_wait",))
    out.h_wait[mask] = WAIT_NONE
    return out


def pinned_copies(graph: ReplayGraph, fix: Fix) -> ReplayGraph:
    """Pageable host<->device copies come from pinned memory with non_blocking=True: each runs at
    `bytes_per_s` and the host goes on instead of waiting for it."""
    pageable = (
        (graph.d_kind == MEMCPY)
        & np.array([p is False for p in graph.d_pinned])
        & _in_steps(graph, graph.d_step)
    )
    out = graph.copy(copy_arrays=("d_dur", "h_wait"))
    out.d_dur[pageable] = graph.d_bytes[pageable] / fix.params["bytes_per_s"] * 1e9
    callers = graph.d_host[pageable]
    waiting_on_own = graph.h_op[callers] >= 0
    out.h_wait[callers[waiting_on_own]] = WAIT_NONE
    return out


def less_host_work(graph: ReplayGraph, fix: Fix) -> ReplayGraph:
    """`saved_ns_per_step` of host work leaves each step (a batch fetched by DataLoader workers,
    preprocessing moved to the GPU), taken from the step's longest host gaps first; without it, all
    of the step's host work longer than a dispatch goes, or `share` of each piece of it."""
    out = graph.copy(copy_arrays=("h_gap",))
    if "share" in fix.params:
        long_gaps = _in_steps(graph, graph.h_step) & (graph.h_gap >= LAUNCH_GAP_MAX_NS)
        out.h_gap[long_gaps] *= 1.0 - min(max(float(fix.params["share"]), 0.0), 1.0)
        return out
    saved = float(fix.params.get("saved_ns_per_step", np.inf))
    for step in graph.step_ids:
        idx = np.flatnonzero((graph.h_step == step) & (graph.h_gap >= LAUNCH_GAP_MAX_NS))
        left = saved
        for i in idx[np.argsort(-graph.h_gap[idx], kind="stable")]:
            if left <= 0:
                break
            cut = min(left, out.h_gap[i])
            out.h_gap[i] -= cut
            left -= cut
    return out


def graph_launch(graph: ReplayGraph, fix: Fix) -> ReplayGraph:
    """CUDA graphs (torch.compile mode="reduce-overhead"): a step's launches, copies and memsets
    become one graph launch, so their per-call host cost, their host waits and the dispatch gaps
    between them go, and each node follows the one before it on the device. Host work longer than a
    dispatch stays, but for `host_work_share` of each piece (the longer dispatch gaps a captured step
    also loses: autograd's backward, the optimizer step)."""
    issues = (graph.h_kind == CALL) & (graph.h_op >= 0) & _in_steps(graph, graph.h_step)
    dispatch = issues & (graph.h_gap < LAUNCH_GAP_MAX_NS)
    out = graph.copy(copy_arrays=("h_gap", "h_cost", "h_wait", "d_lat", "d_sgap"))
    first_of_step = np.zeros(graph.n_host, bool)
    for step in graph.step_ids:
        idx = np.flatnonzero(issues & (graph.h_step == step))
        if len(idx):
            first_of_step[idx[0]] = True
    out.h_gap[dispatch & ~first_of_step] = 0.0
    out.h_cost[issues & ~first_of_step] = 0.0
    own_wait = issues & (graph.h_wait_op == graph.h_op)
    out.h_wait[own_wait] = WAIT_NONE
    ops = graph.h_op[issues]
    out.d_sgap[ops] = graph.stream_gap_ns
    share = min(max(float(fix.params.get("host_work_share", 0.0)), 0.0), 1.0)
    if share:
        long_gaps = _in_steps(graph, graph.h_step) & (graph.h_gap >= LAUNCH_GAP_MAX_NS)
        out.h_gap[long_gaps] *= 1.0 - share
    return out


# Parameters that widen how far a fix reaches without changing what it transforms: two findings whose
# fixes differ only in these replay one change of the step (hybrid.replay.predict keeps one saving).
SCOPE_PARAMS = ("host_launches",)


def fused_kernels(graph: ReplayGraph, fix: Fix) -> ReplayGraph:
    """What torch.compile fuses (hybrid.analysis.fusion) becomes one kernel per group: the group keeps its
    longest member's time. With `host_launches` (default 1) the launch calls of the group's other
    elementwise members and their dispatch gaps go too; 0 replays the device side alone, the fusion
    finding's own share (the launches are the launch findings' time). Only elementwise members' launches
    go, as when this replay was measured (the torchvision detector's default compile on the H100: 2.27 ms
    replayed, 2.43 realized): dropping every fused member's launch replays 7.6 ms on the detector's H200
    capture where this replays 5.7 ms."""
    from hybrid.analysis.fusion import fused_run_ns, fusible_mask, fusion_runs
    from hybrid.analysis.kernel_classes import classify_kernels, per_kernel

    names = pd.Series(graph.d_name, dtype="category")
    classes = classify_kernels(names)  # once, for both masks
    fusible = fusible_mask(names, classes) & (graph.d_kind == KERNEL) & _in_steps(graph, graph.d_step)
    order = np.argsort(graph.d_stream, kind="stable")  # each stream's device events in their order
    positions, starts = fusion_runs(fusible[order], graph.d_stream[order], graph.d_step[order])
    members = order[positions]
    out = graph.copy(copy_arrays=("d_dur", "d_lat", "d_sgap", "h_gap", "h_cost"))
    first = np.zeros(len(members), bool)
    first[starts] = True
    rest = members[~first]
    out.d_dur[members[first]] = fused_run_ns(graph.d_dur[members], starts)
    out.d_dur[rest] = 0.0
    out.d_sgap[rest] = 0.0
    if fix.params.get("host_launches", 1.0):
        elementwise = per_kernel(names, classes, "kind") == "elementwise"
        calls = graph.d_host[rest[elementwise[rest]]]
        short = graph.h_gap[calls] < LAUNCH_GAP_MAX_NS
        out.h_gap[calls[short]] = 0.0
        out.h_cost[calls] = 0.0
    return out


def overlapped_communication(graph: ReplayGraph, fix: Fix) -> ReplayGraph:
    """Collectives overlap with compute: compute no longer waits for a collective inside the step
    (bucketed all-reduce during backward); the step still ends after its last collective."""
    from hybrid.profile import is_communication

    comm = is_communication(pd.Series(graph.d_name)) & (graph.d_kind == KERNEL)
    waits_on_comm = (graph.d_dep >= 0) & comm[np.clip(graph.d_dep, 0, None)] & ~comm
    out = graph.copy(copy_arrays=("d_dep",))
    out.d_dep[waits_on_comm] = -1
    return out


FIXES: dict[str, Callable[[ReplayGraph, Fix], ReplayGraph]] = {
    "faster_gemms": faster_gemms,
    "faster_kernels": faster_kernels,
    "no_syncs": no_syncs,
    "pinned_copies": pinned_copies,
    "less_host_work": less_host_work,
    "graph_launch": graph_launch,
    "fused_kernels": fused_kernels,
    "overlapped_communication": overlapped_communication,
}


def apply(graph: ReplayGraph, fix: Fix) -> ReplayGraph:
    """The graph with `fix` applied (a new graph; `graph` is unchanged)."""
    try:
        transform = FIXES[fix.kind]
    except KeyError:
        raise ValueError(f"unknown fix kind {fix.kind!r}; known: {', '.join(FIXES)}") from None
    return transform(graph, fix)


def host_scaled(graph: ReplayGraph, factor: float) -> ReplayGraph:
    """Host time (gaps, call costs, wake-ups, the launch path to the device) scaled by `factor`: the
    same step with a lighter or heavier host, e.g. without the tracing overhead of the pass it was
    measured under (CUPTI lengthens every call and every launch)."""
    out = graph.copy(copy_arrays=("h_gap", "h_cost", "h_wake", "d_lat"))
    out.h_gap *= factor
    out.h_cost *= factor
    out.h_wake *= factor
    out.d_lat *= factor
    return out
