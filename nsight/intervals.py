"""Vectorized interval lookups for attributing events to ranges (steps, module calls).

Loops run over ranges or nesting depth, never over events, so a million kernels cost a few numpy
passes.
"""

from __future__ import annotations

import numpy as np

NO_RANGE = -1


def stab_disjoint(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the range [start, end] holding each time, NO_RANGE when none. Ranges must be
    sorted by start and must not overlap (steps)."""
    idx = np.searchsorted(starts, times, side="right") - 1
    safe = np.clip(idx, 0, None)
    inside = (idx >= 0) & (times <= ends[safe]) if len(starts) else np.zeros(len(times), dtype=bool)
    return np.where(inside, idx, NO_RANGE)


def nesting_parents(ends: np.ndarray) -> np.ndarray:
    """For ranges sorted by (start, -end) that nest properly (NVTX push/pop on one thread), the
    index of each range's innermost enclosing range, NO_RANGE for top level."""
    parents = np.full(len(ends), NO_RANGE, dtype=np.int64)
    end_list = ends.tolist()
    stack: list[int] = []
    for i, end in enumerate(end_list):
        # Pops ranges that closed before this one starts, and ranges that merely overlap it
        # (start/end ranges may): neither encloses it.
        while stack and end_list[stack[-1]] < end:
            stack.pop()
        if stack:
            parents[i] = stack[-1]
        stack.append(i)
    return parents


def depths(parents: np.ndarray) -> np.ndarray:
    """Nesting depth (0 = top level) from nesting_parents; parents precede children."""
    out = np.zeros(len(parents), dtype=np.int64)
    for i, parent in enumerate(parents.tolist()):
        if parent != NO_RANGE:
            out[i] = out[parent] + 1
    return out


def stab_innermost(times: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   parents: np.ndarray) -> np.ndarray:
    """Index of the innermost range holding each time, NO_RANGE when none, for nested ranges
    sorted by (start, -end) with parents from nesting_parents.

    The latest range starting at or before t either holds t or closed before it; in the latter
    case the answer is among its ancestors, so walk up until one holds t. Each pass moves every
    unresolved time one level up, so the passes are bounded by the nesting depth.
    """
    idx = np.searchsorted(starts, times, side="right") - 1
    while True:
        pending = idx >= 0
        pending[pending] = ends[idx[pending]] < times[pending]
        if not pending.any():
            return idx
        idx[pending] = parents[idx[pending]]


def stab_overlapping(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Index of a range [start, end) holding each time, NO_RANGE when none, for ranges that may overlap
    in any way (kernels on several streams): of the ranges started by t, the one reaching furthest, so
    each time is given to one range only."""
    times = np.asarray(times, np.int64)
    if len(starts) == 0:
        return np.full(len(times), NO_RANGE, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[order], np.asarray(ends)[order]
    reach = np.maximum.accumulate(e)
    # Position of the range that set the running reach (the last one to raise it).
    setter = np.maximum.accumulate(np.where(e >= reach, np.arange(len(e)), 0))
    i = np.searchsorted(s, times, side="right") - 1
    safe = np.clip(i, 0, None)
    holds = (i >= 0) & (reach[safe] > times)
    return np.where(holds, order[setter[safe]], NO_RANGE)
