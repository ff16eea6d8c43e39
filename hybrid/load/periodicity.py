"""Steps of a capture that has no step markers, from the periodicity of the launching thread's CUDA
call sequence: each runtime call is a symbol (the kernel it launched, else the API's name), and a
training or inference loop repeats the same run of symbols once per iteration.

- period: first the shortest p such that symbol i equals symbol i + p for at least MIN_MATCH of the
  sequence's second half (the steady tail); candidates are the dominant gaps between repeats of
  each symbol. That unit is the innermost repeat (one layer of identical layers, one cell update of
  a recurrent loop). Then, outward, the step grows to the outermost unit that holds the loop the
  user wrote: a multiple of the current unit marked by a symbol that recurs once per multiple (a
  model's head, the loss, a concat of per-request outputs) or by a host gap at one phase of it (the
  script's Python between iterations), as long as it repeats REGULAR_COUNT times in the tail. An
  epoch around the steps repeats a few times in a capture, so the step stays the inner iteration.
- anchor: a symbol that occurs once per period, preferably the one after the longest host gap (where
  the script's Python runs between iterations); each of its occurrences starts a step. Anchoring on
  a symbol, not on a fixed stride, keeps the steps in phase across irregular inserts (the prefill of
  each generate() call).
- start-up: the steady region begins after the last run of BAD_RUN periods that do not repeat; what
  comes before it (imports, model construction, CUDA init, autotuning) is never part of a step.

Cost: sorts and folds over the sequence, O(n log n) in the number of calls n; a candidate period is
checked on at most MATCH_SAMPLE positions. numpy only; the caller turns the step starts into
Profile.steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_MATCH = 0.9
MIN_REPEATS = 3  # periods in the steady tail
MIN_STEADY_SHARE = 0.8  # share of repeating periods from the steady start to the end of the capture
# A symbol that recurs this often in the tail at one regular gap, or a host gap that does, marks an
# outer unit; an epoch around the steps repeats fewer times in a capture and stays out.
REGULAR_COUNT = 8
REGULAR_SHARE = 0.8  # of its gaps at that one value
BOUNDARY_JUMP = 2.5  # a multiple of the period whose boundary host gap is this much larger is the step
# Positions compared to score one candidate period (evenly spread over the tail): the share matched
# is then known within about 0.2% (binomial standard error at 200k), far inside MIN_MATCH's margin.
MATCH_SAMPLE = 200_000
# Outer-unit candidates from the spacing of large host gaps: the most common spacings tried.
SPACING_CANDIDATES = 3


@dataclass
class Periodic:
    period: int  # symbols per step
    match: float  # share of the tail where symbol i == symbol i + period
    starts: np.ndarray  # indices into the sequence of each step's first symbol, steady region only
    steady_from: int  # index where the steady region begins
    how: str  # which rule set the period: "shortest", "regular symbol", "host gap"


def match_rate(sequence: np.ndarray, period: int) -> float:
    """Share of positions i (at most MATCH_SAMPLE, evenly spread) where symbol i == symbol i + period."""
    compared = len(sequence) - period
    if period <= 0 or compared <= 0:
        return 0.0
    stride = max(1, compared // MATCH_SAMPLE)
    here = sequence[:compared:stride]
    return float(np.mean(here == sequence[period::stride][: len(here)]))


def _dominant_gaps(tail: np.ndarray) -> list[tuple[int, int, float]]:
    """(gap, occurrences, share of the symbol's gaps at that gap) per symbol of `tail` seen at least
    MIN_REPEATS times: one sort of the positions by symbol, one count of (symbol, gap) pairs."""
    if len(tail) < 2:
        return []
    order = np.argsort(tail, kind="stable")  # positions grouped by symbol, ascending within each
    symbols = tail[order]
    _, code = np.unique(symbols, return_inverse=True)
    occurrences = np.bincount(code)
    same = code[1:] == code[:-1]
    gap = np.diff(order)[same]
    gap_code = code[1:][same]
    pairs, pair_counts = np.unique(gap_code.astype(np.int64) * (len(tail) + 1) + gap, return_counts=True)
    pair_code, pair_gap = pairs // (len(tail) + 1), pairs % (len(tail) + 1)
    best = np.lexsort((-pair_counts, pair_code))  # per symbol, its most common gap first (smallest on ties)
    first = best[np.r_[True, pair_code[best][1:] != pair_code[best][:-1]]]
    keep = occurrences[pair_code[first]] >= MIN_REPEATS
    first = first[keep]
    seen = occurrences[pair_code[first]]
    return [
        (int(g), int(c), float(k / (c - 1)))
        for g, c, k in zip(pair_gap[first], seen, pair_counts[first], strict=True)
    ]


def _host_gaps(host_start_ns: np.ndarray, host_end_ns: np.ndarray) -> np.ndarray:
    """Host time between one call's end and the next call's start: the script's own Python time (a
    call that blocks on a full launch queue does not count)."""
    gaps = np.zeros(len(host_start_ns), dtype=np.float64)
    gaps[1:] = np.maximum(host_start_ns[1:] - host_end_ns[:-1], 0)
    return gaps


def _boundary_strength(gaps: np.ndarray, period: int) -> tuple[float, int]:
    """(largest per-phase median host gap / median gap, that phase) with the sequence folded at `period`."""
    usable = (len(gaps) // period) * period
    base = float(np.median(gaps)) or 1.0
    folded = np.median(gaps[:usable].reshape(-1, period), axis=0)
    phase = int(np.argmax(folded))
    return float(folded[phase]) / base, phase


def find_period(symbols: np.ndarray, host_start_ns: np.ndarray, host_end_ns: np.ndarray) -> Periodic | None:
    """The repeating unit of `symbols` (host start and end time of each call), or None when the
    sequence does not repeat at least MIN_REPEATS times with MIN_MATCH."""
    symbols = np.asarray(symbols)
    n = len(symbols)
    if n < 2 * MIN_REPEATS:
        return None
    half = n // 2
    tail = symbols[half:]
    dominant = _dominant_gaps(tail)
    limit = len(tail) // MIN_REPEATS
    period = None
    for candidate in sorted({gap for gap, _, _ in dominant if 0 < gap <= limit}):
        if match_rate(tail, candidate) >= MIN_MATCH:
            period = candidate
            break
    if period is None:
        return None
    how = "shortest"
    gaps = _host_gaps(host_start_ns, host_end_ns)
    while True:  # outward, one nesting level at a time
        outer = _regular_symbol_unit(tail, dominant, period) or _host_gap_unit(gaps[half:], period)
        if outer is None:
            break
        period, how = outer
    steady_from = _steady_start(symbols, period)
    starts = _step_starts(symbols, gaps, steady_from, period)
    if starts is None or len(starts) < MIN_REPEATS:
        return None
    return Periodic(
        period=period, match=match_rate(tail, period), starts=starts, steady_from=steady_from, how=how
    )


def _regular_symbol_unit(
    tail: np.ndarray, dominant: list[tuple[int, int, float]], period: int
) -> tuple[int, str] | None:
    """A symbol that recurs regularly at a longer gap is part of every step, so the step is that long
    (a deep net of identical blocks repeats every block, but its head runs once per forward). It must
    also repeat better than the shorter unit does (close half of its mismatch): a symbol that recurs
    every 4th decode step (a cache that grows in chunks) does not make 4 steps one."""
    shortest_match = match_rate(tail, period)
    regular = [
        gap
        for gap, count, share in dominant
        if gap > period
        and count >= REGULAR_COUNT
        and share >= REGULAR_SHARE
        and len(tail) // gap >= MIN_REPEATS
        and match_rate(tail, gap) >= max(MIN_MATCH, shortest_match + 0.5 * (1 - shortest_match))
    ]
    return (max(regular), "regular symbol") if regular else None


def _host_gap_unit(gaps: np.ndarray, period: int) -> tuple[int, str] | None:
    """Identical blocks with nothing else in the step (a compiled graph of identical layers, a
    recurrent cell): the script's loop shows as a host gap at one phase of a multiple of the block,
    BOUNDARY_JUMP times the block's own largest boundary gap. Candidates are the common spacings
    between large gaps (at thresholds doubling from half the jump); the smallest whose fold shows the
    jump is the next unit out."""
    if len(gaps) < period * REGULAR_COUNT * 2:
        return None
    strength, _ = _boundary_strength(gaps, period)
    block_gap = strength * (float(np.median(gaps)) or 1.0)
    candidates: set[int] = set()
    # Thresholds from half the jump up, doubling: at the right one the boundaries stand alone (the
    # launch capture's step boundary is 16x the median gap, while 0.1% of all gaps exceed 3x by jitter).
    threshold = 0.5 * BOUNDARY_JUMP * block_gap
    while (large := np.flatnonzero(gaps >= threshold)).size >= REGULAR_COUNT:
        spacing, counts = np.unique(np.diff(large), return_counts=True)
        fits = (spacing > period) & (spacing % period == 0) & (spacing <= len(gaps) // REGULAR_COUNT)
        spacing, counts = spacing[fits], counts[fits]
        candidates.update(spacing[np.argsort(-counts, kind="stable")[:SPACING_CANDIDATES]].tolist())
        threshold *= 2
    for candidate in sorted(candidates):
        if _boundary_strength(gaps, candidate)[0] >= BOUNDARY_JUMP * strength:
            return int(candidate), "host gap"
    return None


def _steady_start(symbols: np.ndarray, period: int) -> int:
    """Start of the steady region: the earliest block of `period` symbols that repeats its successor
    and from which on at least MIN_STEADY_SHARE of the blocks do (the per-call inserts of generate()
    are a few non-repeating blocks among many; start-up is a long run of them)."""
    equal = symbols[:-period] == symbols[period:]
    blocks = len(equal) // period
    if blocks == 0:
        return 0
    offset = len(equal) - blocks * period  # blocks end exactly at the end of the sequence
    good = equal[offset:].reshape(blocks, period).mean(axis=1) >= MIN_MATCH
    suffix_good = np.cumsum(good[::-1])[::-1]
    suffix_len = np.arange(blocks, 0, -1)
    ok = good & (suffix_good / suffix_len >= MIN_STEADY_SHARE)
    first = int(np.argmax(ok)) if ok.any() else blocks - 1
    return offset + first * period


def _step_starts(symbols: np.ndarray, gaps: np.ndarray, steady_from: int, period: int) -> np.ndarray | None:
    """Each step's first symbol: occurrences of a symbol found once per period (the one after the
    longest median host gap), else the calls after a boundary-sized host gap at the strongest phase."""
    steady, steady_gaps = symbols[steady_from:], gaps[steady_from:]
    periods = len(steady) / period
    values, code, counts = np.unique(steady, return_inverse=True, return_counts=True)
    once = np.abs(counts - periods) <= max(1.0, 0.1 * periods)
    if once.any():
        anchor = values[_largest_median(code, steady_gaps, once[code])]
        return steady_from + np.flatnonzero(steady == anchor)
    strength, phase = _boundary_strength(steady_gaps, period)
    if strength <= 1.0:
        return None
    usable = (len(steady_gaps) // period) * period
    boundary_gap = float(np.median(steady_gaps[phase:usable:period]))
    at_phase, counts_at_phase = np.unique(steady[phase:usable:period], return_counts=True)
    anchor = at_phase[np.argmax(counts_at_phase)]  # the first block may still be start-up
    hits = np.flatnonzero((steady == anchor) & (steady_gaps >= 0.5 * boundary_gap))
    kept: list[int] = []
    for hit in hits:  # one boundary per period: of two hits closer than half a period, the larger gap
        if kept and hit - kept[-1] < period // 2:
            if steady_gaps[hit] > steady_gaps[kept[-1]]:
                kept[-1] = int(hit)
            continue
        kept.append(int(hit))
    return steady_from + np.array(kept, dtype=np.int64)


def _largest_median(code: np.ndarray, gaps: np.ndarray, wanted: np.ndarray) -> int:
    """The code (among positions `wanted`) whose positions have the largest median gap; the smallest
    code on ties. One lexsort, not one median per code."""
    code, gaps = code[wanted], gaps[wanted]
    order = np.lexsort((gaps, code))
    code, gaps = code[order], gaps[order]
    first = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    size = np.diff(np.r_[first, len(code)])
    median = (gaps[first + (size - 1) // 2] + gaps[first + size // 2]) / 2
    return int(code[first[int(np.argmax(median))]])
