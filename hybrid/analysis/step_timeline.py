"""One representative measured step as a small event list for results.json (`timeline`): the steady step
of median duration, with its kernels, copies and memsets per stream and the host's runtime calls
(launches, synchronizations) per thread, so the HTML report can draw the step without the raw export.

Kept small (at most MAX_EVENTS events, names interned in one table): device work and blocking calls
first, then launch calls, each kind longest first; `events_total` says how many the step had."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.analysis.fusion import fusible_mask
from hybrid.analysis.kernel_classes import matmul_precision
from hybrid.analysis.steps import frame_source, steady_steps
from hybrid.numbers import NS_PER_US
from hybrid.profile import Profile

MAX_EVENTS = 2000
US_DECIMALS = 2  # 10 ns: below the resolution a one-step drawing can show
COLUMNS = ("lane", "kind", "start_us", "dur_us", "name")
# Kinds in the order they are kept when the step has more than MAX_EVENTS events.
KIND_ORDER = ("sync", "memcpy", "memset", "kernel", "launch")


def _overlapping(frame: pd.DataFrame, start_ns: int, end_ns: int) -> pd.DataFrame:
    if frame.empty:
        return frame
    return frame[(frame["end_ns"] > start_ns) & (frame["start_ns"] < end_ns)]


def _main_thread(profile: Profile) -> int | None:
    """The thread that launched most kernels: synchronizations are drawn on it (the sync frame has no tid)."""
    if profile.launches.empty:
        return None
    return int(profile.launches["tid"].mode().iloc[0])


def representative_step(profile: Profile) -> pd.Series | None:
    """The steady step whose duration is the median one (the earlier of two middle steps)."""
    steps = steady_steps(profile)
    if steps.empty:
        return None
    ordered = steps.sort_values(["dur_ns", "start_ns"], kind="stable").reset_index(drop=True)
    return ordered.iloc[(len(ordered) - 1) // 2]


def step_timeline(profile: Profile) -> dict | None:
    """The `timeline` block, or None when the profile has no measured step with device work."""
    step = representative_step(profile)
    if step is None or profile.kernels.empty:
        return None
    start, end = int(step["start_ns"]), int(step["end_ns"])
    main = _main_thread(profile)
    rows: list[tuple[str, str, int, int, str]] = []  # lane, kind, start_ns, end_ns, name
    kernels = _overlapping(profile.kernels, start, end)
    precision = matmul_precision(kernels["name"]) if not kernels.empty else pd.Series(dtype=object)
    precisions: dict[str, str] = {}
    for row, label in zip(kernels.itertuples(index=False), precision, strict=True):
        rows.append((f"stream {row.stream}", "kernel", row.start_ns, row.end_ns, row.name))
        if isinstance(label, str):
            precisions[row.name] = label
    for row in _overlapping(profile.memcpys, start, end).itertuples(index=False):
        rows.append(
            (f"stream {row.stream}", "memcpy", row.start_ns, row.end_ns, f"memcpy {row.kind} {row.bytes} B")
        )
    for row in _overlapping(profile.memsets, start, end).itertuples(index=False):
        rows.append((f"stream {row.stream}", "memset", row.start_ns, row.end_ns, f"memset {row.bytes} B"))
    host = "host" if main is None else f"host thread {main}"
    for row in _overlapping(profile.syncs, start, end).itertuples(index=False):
        rows.append((host, "sync", row.start_ns, row.end_ns, str(row.api)))
    for row in _overlapping(profile.launches, start, end).itertuples(index=False):
        rows.append(
            (
                host if row.tid == main else f"host thread {row.tid}",
                "launch",
                row.start_ns,
                row.end_ns,
                str(row.api),
            )
        )
    total = len(rows)
    rank = {kind: index for index, kind in enumerate(KIND_ORDER)}
    kept = sorted(rows, key=lambda r: (rank[r[1]], -(r[3] - r[2])))[:MAX_EVENTS]
    kept.sort(key=lambda r: (r[2], rank[r[1]]))
    # Host lanes first (the main thread on top), then streams in number order.
    lanes = sorted(
        {r[0] for r in kept},
        key=lambda lane: (
            not lane.startswith("host"),
            lane != host,
            int(lane.split()[-1]) if lane[-1].isdigit() else 0,
        ),
    )
    lane_index = {lane: index for index, lane in enumerate(lanes)}
    names = list(dict.fromkeys(r[4] for r in kept))
    name_index = {name: index for index, name in enumerate(names)}
    events = [
        [
            lane_index[lane],
            kind,
            round((max(s, start) - start) / NS_PER_US, US_DECIMALS),
            round((min(e, end) - max(s, start)) / NS_PER_US, US_DECIMALS),
            name_index[name],
        ]
        for lane, kind, s, e, name in kept
    ]
    return {
        "step": int(step["step"]),
        "duration_us": round((end - start) / NS_PER_US, US_DECIMALS),
        "source": frame_source(profile, "kernels"),
        "lanes": lanes,
        "names": names,
        "precisions": {str(name_index[n]): p for n, p in precisions.items() if n in name_index},
        # Indices of the names of the kernels a compile would fuse (the fusion finding is about them).
        "fusible": [int(i) for i in np.flatnonzero(fusible_mask(pd.Series(names, dtype=object)))],
        "columns": list(COLUMNS),
        "events": events,
        "events_total": total,
    }
