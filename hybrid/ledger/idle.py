"""The idle side's layers, in the precedence of causes.IDLE_CAUSES: what the host was doing while the
device ran nothing. Host intervals of the analyzed timeline (syncs, launches) are used as they are;
operator intervals come through clock.carry_to_analyzed_clock."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.analysis.op_ranges import compiled_regions, cpu_heavy_by_name, data_loader_fetches, top_level_ops
from hybrid.ledger.clock import carry_to_analyzed_clock
from hybrid.ledger.partition import Layer
from hybrid.profile import Profile
from nsight.intervals import NO_RANGE, covered, interval_union, stab_overlapping

# An idle gap with a launch inside that is shorter than this is launch/dispatch overhead; a longer
# one holds more host work than one op's dispatch (~5-20 us) and counts as host compute. The replay's
# fixes cut host gaps at the same length (hybrid.replay.transforms: a launch fix removes the shorter
# ones, a host-work fix shortens the longer), so a fix removes what the ledger charged to its cause.
LAUNCH_GAP_MAX_NS = 100_000


def sync_layers(profile: Profile) -> list[Layer]:
    """Host blocked in a sync, and the relaunch the drained queue waits for after it (up to
    LAUNCH_GAP_MAX_NS): a stream or device sync, then a synchronous copy API."""
    syncs = profile.syncs.reset_index(drop=True)
    memcpy = syncs["kind"].eq("memcpy").to_numpy(bool)
    out = []
    for cause, mask in (("sync_wait", ~memcpy), ("blocking_copy", memcpy)):
        part = syncs[mask]
        relaunch_end = part["end_ns"].to_numpy(np.int64) + LAUNCH_GAP_MAX_NS
        out.append(Layer.of(cause, "syncs", part["start_ns"], relaunch_end, part.index))
    return out


def has_graph_breaks(profile: Profile) -> bool:
    breaks = profile.extras.get("graph_breaks")
    return bool(len(breaks)) if isinstance(breaks, list) else bool(breaks)


def _carried(profile: Profile, ops: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    return carry_to_analyzed_clock(ops, profile.ops_clock_steps, steps)


def compiled_break_layer(profile: Profile, ops: pd.DataFrame, steps: pd.DataFrame) -> Layer:
    """The outermost torch.compile'd regions, when the injector saw graph breaks: the guard checks,
    graph switches and eager code between the pieces run inside them."""
    outer = _carried(profile, compiled_regions(ops if has_graph_breaks(profile) else ops.iloc[0:0]), steps)
    return Layer.of("compiled_region_break", "ops", outer["start_ns"], outer["end_ns"], outer.index)


def dataloader_layer(profile: Profile, ops: pd.DataFrame, steps: pd.DataFrame) -> Layer:
    fetches = _carried(profile, data_loader_fetches(ops), steps)
    return Layer.of("dataloader_fetch", "ops", fetches["start_ns"], fetches["end_ns"], fetches.index)


def cpu_heavy_layer(profile: Profile, ops: pd.DataFrame, steps: pd.DataFrame) -> Layer:
    """Every call of the CPU-heavy operators (hybrid.analysis.op_ranges.cpu_heavy_by_name, the names the
    cpu_heavy_ops metric counts), judged over all of `ops`."""
    top = top_level_ops(ops)
    heavy = _carried(profile, top[top["name"].isin(cpu_heavy_by_name(top).index)], steps)
    return Layer.of("cpu_heavy_op", "ops", heavy["start_ns"], heavy["end_ns"], heavy.index)


def after_sync_layer(profile: Profile, idle_runs: pd.DataFrame) -> Layer:
    """The host work after a sync, from the sync on, in each idle run (across step boundaries, which are
    only markers) that opened while the host sat in a sync or in which the host entered one: without the
    syncs the host would have queued that work before the device ran dry.

    A sync entered inside an idle run counts too: in the H100 capture of
    benchmarks/planted/sync_cuda_synchronize.py the GPU finished the optimizer's kernels while the host was
    still in Python, the host's next sync took 33 us, and the host then sampled the next batch for 4.1 ms
    while the device waited: 4 ms a step read as other host work, and the sync finding held 1.6 ms where
    its fixed twin saved 4.5 ms (H200)."""
    a, b = idle_runs["start_ns"].to_numpy(np.int64), idle_runs["end_ns"].to_numpy(np.int64)
    syncs = profile.syncs.reset_index(drop=True)
    starts = syncs["start_ns"].to_numpy(np.int64)
    if not len(starts):
        return Layer.of("host_after_sync", "syncs", a[:0], b[:0], np.empty(0, np.int64))
    in_sync = stab_overlapping(starts, syncs["end_ns"].to_numpy(np.int64), a)
    by_start = np.argsort(starts, kind="stable")
    following = np.searchsorted(starts[by_start], a, side="right")
    next_row = by_start[np.clip(following, 0, len(by_start) - 1)]
    entered = (in_sync == NO_RANGE) & (following < len(by_start)) & (starts[next_row] < b)
    drained = (in_sync != NO_RANGE) | entered
    begin = np.where(entered, starts[next_row], a)
    row = np.where(entered, next_row, in_sync)
    return Layer.of("host_after_sync", "syncs", begin[drained], b[drained], row[drained])


def launch_gap_layer(profile: Profile, gaps: pd.DataFrame) -> Layer:
    """Idle gaps within one step no longer than LAUNCH_GAP_MAX_NS that hold a launch call: launch overhead."""
    a, b = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    launches = profile.launches.reset_index(drop=True)
    ls, le = launches["start_ns"].to_numpy(np.int64), launches["end_ns"].to_numpy(np.int64)
    us, ue = interval_union(ls, le)
    short = (covered(us, ue, a, b) > 0) & (b - a <= LAUNCH_GAP_MAX_NS)
    # The launch named is the last one to start before the gap closed.
    order = np.argsort(ls, kind="stable")
    last = np.searchsorted(ls[order], b, side="left") - 1
    launch_row = np.where(last >= 0, order[np.clip(last, 0, None)], NO_RANGE) if len(ls) else last
    return Layer.of("launch_gap", "launches", a[short], b[short], launch_row[short])
