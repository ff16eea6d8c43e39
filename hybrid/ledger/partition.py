"""Cutting step windows into pieces that each belong to one cause: every interval edge of every layer
is a cut, so a piece lies wholly inside or wholly outside each interval, and the first layer (in
precedence) with an interval over the piece owns it. Vectorized: loops run over layers, not events."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsight.intervals import NO_RANGE, stab_disjoint, stab_overlapping


@dataclass(frozen=True)
class Layer:
    """Intervals [start, end) on the analyzed clock that give their time to `cause`; `refs` names the
    event behind each one ("syncs#12": row 12 of Profile.syncs)."""

    cause: str
    starts: np.ndarray
    ends: np.ndarray
    refs: np.ndarray

    @staticmethod
    def of(cause: str, frame_name: str, starts, ends, rows) -> Layer:
        rows = np.asarray(rows, dtype=np.int64)
        refs = np.array([f"{frame_name}#{r}" for r in rows.tolist()], dtype=object)
        return Layer(cause, np.asarray(starts, np.int64), np.asarray(ends, np.int64), refs)


def cut(windows: pd.DataFrame, layers: list[Layer]) -> pd.DataFrame:
    """The windows (step, start_ns, end_ns; sorted, disjoint) cut at every layer edge inside them."""
    ws, we = windows["start_ns"].to_numpy(np.int64), windows["end_ns"].to_numpy(np.int64)
    edges = np.unique(np.concatenate([ws, we] + [x for layer in layers for x in (layer.starts, layer.ends)]))
    a, b = edges[:-1], edges[1:]
    idx = stab_disjoint(a, ws, we)
    inside = idx != NO_RANGE
    inside[inside] = a[inside] < we[idx[inside]]
    return pd.DataFrame({"step": windows["step"].to_numpy(np.int64)[idx[inside]],
                         "start_ns": a[inside], "end_ns": b[inside]})


def own(pieces: pd.DataFrame, layers: list[Layer], default: str | None) -> pd.DataFrame:
    """Each piece given to the first layer covering it (`default` and no ref when none does)."""
    a = pieces["start_ns"].to_numpy(np.int64)
    cause = np.full(len(a), default, dtype=object)
    ref = np.full(len(a), None, dtype=object)
    open_ = np.ones(len(a), bool)
    for layer in layers:
        if not open_.any():
            break
        hit = stab_overlapping(layer.starts, layer.ends, a[open_])
        taken = np.flatnonzero(open_)[hit != NO_RANGE]
        cause[taken] = layer.cause
        ref[taken] = layer.refs[hit[hit != NO_RANGE]]
        open_[taken] = False
    return pieces.assign(cause=cause, ref=ref)


def merge_runs(segments: pd.DataFrame) -> pd.DataFrame:
    """Adjacent segments of one step with the same state, cause and ref joined into one."""
    if segments.empty:
        return segments
    seg = segments.sort_values("start_ns", kind="stable").reset_index(drop=True)
    same = np.zeros(len(seg), bool)
    key = seg["step"].astype(str) + "|" + seg["state"] + "|" + seg["cause"] + "|" + seg["ref"].astype(str)
    same[1:] = (key.to_numpy()[1:] == key.to_numpy()[:-1]) & (
        seg["start_ns"].to_numpy()[1:] == seg["end_ns"].to_numpy()[:-1])
    run = np.cumsum(~same)
    first = seg.groupby(run, sort=False).head(1).reset_index(drop=True)
    ends = seg.groupby(run, sort=False)["end_ns"].max().to_numpy()
    return first.assign(end_ns=ends)
