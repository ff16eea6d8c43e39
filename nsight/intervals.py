"""Vectorized interval arithmetic: attributing events to ranges (steps, module calls), and unions and
coverage of event intervals (device busy time). The package's one implementation of both.

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


def step_of(times: np.ndarray, starts: np.ndarray, ends: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The step number of the step window [start, end] holding each time, -1 for none; windows must not
    overlap (in any order)."""
    times = np.asarray(times, np.int64)
    if len(starts) == 0:
        return np.full(len(times), -1, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    idx = stab_disjoint(times, np.asarray(starts)[order], np.asarray(ends)[order])
    numbers = np.asarray(steps, np.int64)[order]
    return np.where(idx == NO_RANGE, -1, numbers[np.clip(idx, 0, None)]).astype(np.int64)


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


def stab_innermost(
    times: np.ndarray, starts: np.ndarray, ends: np.ndarray, parents: np.ndarray
) -> np.ndarray:
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


def interval_union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint intervals covering the same time as the input intervals."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[order], np.asarray(ends)[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], run_end[last]


def covered_before(us: np.ndarray, ue: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time covered by the union (us, ue) before each instant in t."""
    t = np.asarray(t, dtype=np.int64)
    if len(us) == 0:
        return np.zeros(len(t), np.int64)
    cum = np.r_[0, np.cumsum(ue - us)]
    i = np.searchsorted(us, t, side="right") - 1
    safe = np.clip(i, 0, None)
    partial = np.clip(np.minimum(t, ue[safe]) - us[safe], 0, None)
    return np.where(i >= 0, cum[safe] + partial, 0)


def covered(us: np.ndarray, ue: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Time covered by the union within each window [a, b)."""
    return covered_before(us, ue, b) - covered_before(us, ue, a)
