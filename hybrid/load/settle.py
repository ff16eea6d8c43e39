"""When step times have settled: the warmup rule shared by the injector (online, while the script
runs) and the export loader (offline, on steps found in a bare export).

A step sequence has settled at step i when the SETTLE_WINDOW steps ending at i all lie within
SETTLE_TOLERANCE of their median: first calls (cuDNN autotuning, lazy module loading, allocator
growth, torch.compile's first runs) make early steps slower or erratic, and a fixed warmup count
alone does not know how long that lasts. Standard library only: it runs inside the profiled process.
"""

from __future__ import annotations

from collections.abc import Sequence

SETTLE_WINDOW = 3
SETTLE_TOLERANCE = 0.10  # each of the window's steps within 10% of the window's median
# Warmup stops growing after this many steps past the requested count: a workload whose steps never
# settle (generations of different lengths) is measured anyway, with a warning.
MAX_EXTRA_WARMUP = 10


def is_settled(durations: Sequence[float]) -> bool:
    """Whether the last SETTLE_WINDOW durations lie within SETTLE_TOLERANCE of their median."""
    if len(durations) < SETTLE_WINDOW:
        return False
    window = sorted(durations[-SETTLE_WINDOW:])
    median = window[len(window) // 2]
    if median <= 0:
        return False
    return all(abs(d - median) <= SETTLE_TOLERANCE * median for d in window)


def settled_start(durations: Sequence[float], min_drop: int) -> tuple[int, bool]:
    """(index of the first step to measure, whether the steps settled) for a finished sequence: at
    least `min_drop` steps are dropped, then more until the steps before the cut have settled, at most
    MAX_EXTRA_WARMUP more. Leaves at least one step to measure when there is one after min_drop."""
    last_start = max(len(durations) - 1, 0)
    start = min(min_drop, last_start)
    while start <= min(min_drop + MAX_EXTRA_WARMUP, last_start):
        # The steps from `start` on are the measured ones: they must begin settled.
        if is_settled(durations[start : start + SETTLE_WINDOW]):
            return start, True
        start += 1
    return min(min_drop, last_start), False


def describe(durations_ms: Sequence[float]) -> str:
    return ", ".join(f"{d:.3g}" for d in durations_ms[-SETTLE_WINDOW:]) + " ms"
