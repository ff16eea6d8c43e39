"""Cutting step windows into pieces that each belong to one cause: every interval edge of every layer
is a cut, so a piece lies wholly inside or wholly outside each interval, and the first layer (in
precedence) with an interval over the piece owns it. Vectorized: loops run over layers, not events or
steps; the event behind a piece stays a (frame, row) pair of integers until the segments are final."""

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
        return Layer(cause, frame_name, np.asarray(starts, np.int64), np.asarray(ends, np.int64),
                     np.asarray(rows, dtype=np.int64))


def _distinct_sorted(values: np.ndarray) -> np.ndarray:
    values = np.sort(values)
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def cut(windows: pd.DataFrame, layers: list[Layer]) -> pd.DataFrame:
    """The windows (step, start_ns, end_ns; sorted, disjoint) cut at every layer edge inside them."""
    ws, we = windows["start_ns"].to_numpy(np.int64), windows["end_ns"].to_numpy(np.int64)
    edges = _distinct_sorted(np.concatenate([ws, we] + [x for layer in layers for x in (layer.starts, layer.ends)]))
    a, b = edges[:-1], edges[1:]
    idx = stab_disjoint(a, ws, we)
    inside = idx != NO_RANGE
    inside[inside] = a[inside] < we[idx[inside]]
    return pd.DataFrame({"step": windows["step"].to_numpy(np.int64)[idx[inside]],
                         "start_ns": a[inside], "end_ns": b[inside]})


def own(pieces: pd.DataFrame, layers: list[Layer], default: str | None) -> pd.DataFrame:
    """Each piece given to the first layer covering it (`default` and no event when none does):
    `cause`, and the event as `ref_frame` (NaN for none) and `ref_row` (-1 for none); cause and frame are
    categoricals (a million pieces of a dozen causes hold a dozen strings)."""
    a = pieces["start_ns"].to_numpy(np.int64)
    layer_of = np.full(len(a), NO_RANGE, dtype=np.int64)
    ref_row = np.full(len(a), NO_RANGE, dtype=np.int64)
    for index, layer in enumerate(layers):
        if not len(layer.starts):
            continue
        open_ = np.flatnonzero(layer_of == NO_RANGE)
        if not len(open_):
            break
        hit = stab_overlapping(layer.starts, layer.ends, a[open_])
        found = hit != NO_RANGE
        layer_of[open_[found]] = index
        ref_row[open_[found]] = layer.rows[hit[found]]
    causes = list(dict.fromkeys([layer.cause for layer in layers] + ([default] if default else [])))
    cause_code = np.array([causes.index(layer.cause) for layer in layers] + [-1], dtype=np.int64)
    if default:
        cause_code[-1] = causes.index(default)
    frames = sorted({layer.frame for layer in layers})
    frame_code = np.array([frames.index(layer.frame) for layer in layers] + [-1], dtype=np.int64)
    return pieces.assign(cause=pd.Categorical.from_codes(cause_code[layer_of], categories=causes),
                         ref_frame=pd.Categorical.from_codes(frame_code[layer_of], categories=frames),
                         ref_row=ref_row)


def merge_runs(segments: pd.DataFrame) -> pd.DataFrame:
    """Adjacent segments of one step with the same state, cause and event joined into one."""
    if segments.empty:
        return segments
    # Compared as integer codes in time order; only the first segment of each run is taken from the frame.
    order = np.argsort(segments["start_ns"].to_numpy(), kind="stable")
    same = np.zeros(len(order), bool)
    if len(order) > 1:
        same[1:] = segments["start_ns"].to_numpy()[order][1:] == segments["end_ns"].to_numpy()[order][:-1]
        for column in ("step", "state", "cause", "ref_frame", "ref_row"):
            values = segments[column]
            codes = (values.cat.codes.to_numpy() if isinstance(values.dtype, pd.CategoricalDtype)
                     else pd.factorize(values, use_na_sentinel=False)[0])[order]
            same[1:] &= codes[1:] == codes[:-1]
    first = np.flatnonzero(~same)
    ends = segments["end_ns"].to_numpy()[order][np.r_[first[1:] - 1, len(order) - 1]]
    return segments.iloc[order[first]].reset_index(drop=True).assign(end_ns=ends)
