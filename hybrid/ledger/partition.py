"""Cutting step windows into pieces that each belong to one cause: every interval edge of every layer
is a cut, so a piece lies wholly inside or wholly outside each interval, and the first layer (in
precedence) with an interval over the piece owns it. Vectorized and in arrays: loops run over layers,
not events or steps; causes and the events behind pieces stay integer codes until the segments are final
(the probe replicated to 1M kernels cuts into 4.4M segments)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsight.intervals import NO_RANGE, stab_disjoint, stab_overlapping


@dataclass(frozen=True)
class Layer:
    """Intervals [start, end) on the analyzed clock that give their time to `cause`; `rows` names the
    event behind each one, a row of Profile.<frame> (row 12 of Profile.syncs is "syncs#12")."""

    cause: str
    frame: str
    starts: np.ndarray
    ends: np.ndarray
    rows: np.ndarray

    @staticmethod
    def of(cause: str, frame_name: str, starts, ends, rows) -> Layer:
        return Layer(
            cause,
            frame_name,
            np.asarray(starts, np.int64),
            np.asarray(ends, np.int64),
            np.asarray(rows, dtype=np.int64),
        )


@dataclass
class Pieces:
    """Disjoint pieces of the step windows in time order, and who owns each: `cause` and `frame` index
    the caller's lists of causes and frames (NO_RANGE: none yet), `row` the event in that frame."""

    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cause: np.ndarray
    frame: np.ndarray
    row: np.ndarray

    def subset(self, mask: np.ndarray) -> Pieces:
        return Pieces(
            *(values[mask] for values in (self.step, self.start, self.end, self.cause, self.frame, self.row))
        )


def _distinct_sorted(values: np.ndarray) -> np.ndarray:
    values = np.sort(values)
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def cut(windows: pd.DataFrame, layers: list[Layer]) -> Pieces:
    """The windows (step, start_ns, end_ns; sorted, disjoint) cut at every layer edge inside them."""
    ws, we = windows["start_ns"].to_numpy(np.int64), windows["end_ns"].to_numpy(np.int64)
    layer_edges = (edge for layer in layers for edge in (layer.starts, layer.ends))
    edges = _distinct_sorted(np.concatenate([ws, we, *layer_edges]))
    a, b = edges[:-1], edges[1:]
    idx = stab_disjoint(a, ws, we)
    inside = idx != NO_RANGE
    inside[inside] = a[inside] < we[idx[inside]]
    count = int(inside.sum())
    # Causes and frames are a few dozen codes: one byte each (4.4M pieces of the probe: 60 MiB saved).
    return Pieces(
        windows["step"].to_numpy(np.int64)[idx[inside]],
        a[inside],
        b[inside],
        np.full(count, NO_RANGE, dtype=np.int8),
        np.full(count, NO_RANGE, dtype=np.int8),
        np.full(count, NO_RANGE, dtype=np.int64),
    )


def own(
    pieces: Pieces, layers: list[Layer], causes: list[str], frames: list[str], default: str | None = None
) -> None:
    """Give each piece not owned yet to the first layer covering it (`default`, with no event, when none
    does); `causes` and `frames` are the lists the pieces' codes index."""
    for layer in layers:
        if not len(layer.starts):
            continue
        open_ = np.flatnonzero(pieces.cause == NO_RANGE)
        if not len(open_):
            break
        hit = stab_overlapping(layer.starts, layer.ends, pieces.start[open_])
        found = hit != NO_RANGE
        taken = open_[found]
        pieces.cause[taken] = causes.index(layer.cause)
        pieces.frame[taken] = frames.index(layer.frame)
        pieces.row[taken] = layer.rows[hit[found]]
    if default is not None:
        pieces.cause[pieces.cause == NO_RANGE] = causes.index(default)


def merge_runs(pieces: Pieces) -> Pieces:
    """Adjacent pieces (in time order) of one step with the same cause and event joined into one."""
    if len(pieces.start) < 2:
        return pieces
    same = np.zeros(len(pieces.start), bool)
    same[1:] = pieces.start[1:] == pieces.end[:-1]
    for codes in (pieces.step, pieces.cause, pieces.frame, pieces.row):
        same[1:] &= codes[1:] == codes[:-1]
    first = np.flatnonzero(~same)
    merged = pieces.subset(first)
    merged.end = pieces.end[np.r_[first[1:] - 1, len(same) - 1]]
    return merged
