"""Plausibility of measured records and counters against what a capture and a device can hold.

A value no device produces is a corrupt record, not a measurement: a kernel that ends before it starts or
long after the capture stopped (one kernel ending at INT64_MAX made a whole step "100% GPU busy"), DRAM
traffic far beyond the memory's peak (ncu's 1.24 PB/s, 25,700% of an H200's), infinite or negative bytes,
a percentage of peak over 100. Such values are dropped, never used or shown as measured, and a warning
names each kind with an example. The limits are loose on purpose (TOLERANCE): a clock boost or a
rounding puts real counters a few percent over a nominal peak.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.hardware import Peaks

TOLERANCE = 1.1
PERCENT_COLUMNS = (
    "l1_hit_pct",
    "l2_hit_pct",
    "tensor_pipe_pct",
    "sm_throughput_pct",
    "memory_throughput_pct",
    "achieved_occupancy_pct",
    "theoretical_occupancy_pct",
)
# Counts that cannot be negative or infinite.
COUNT_COLUMNS = (
    "duration_ns",
    "dram_read_bytes",
    "dram_write_bytes",
    "l2_bytes",
    "fp64_flops",
    "fp32_flops",
    "fp16_flops",
    "tensor_flops",
    "global_load_sectors_per_request",
    "sm_clock_hz",
)
# No GPU clocks its SMs above this (an H200 boosts to 1.98 GHz).
MAX_SM_CLOCK_HZ = 5e9
EXAMPLES = 3


def _examples(names: pd.Series, texts: list[str]) -> str:
    shown = [
        f"{str(name)[:60]!r} ({text})" for name, text in zip(names[:EXAMPLES], texts[:EXAMPLES], strict=False)
    ]
    more = len(names) - EXAMPLES
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _rate_limit(
    counters: pd.DataFrame, columns: tuple[str, ...], peak: float | None, what: str, unit: str
) -> tuple[np.ndarray, str | None]:
    """Rows whose `columns` summed over the kernel's duration exceed TOLERANCE x `peak` (per second)."""
    if not peak:
        return np.zeros(len(counters), bool), None
    amount = counters[list(columns)].astype(float).sum(axis=1, min_count=len(columns)).to_numpy()
    seconds = counters["duration_ns"].astype(float).to_numpy() / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = amount / seconds
    bad = np.isfinite(rate) & (rate > TOLERANCE * peak)
    if not bad.any():
        return bad, None
    texts = [
        f"{r / 1e12:,.3g} T{unit}/s, {100 * r / peak:,.0f}% of the {peak / 1e12:,.3g} T{unit}/s peak"
        for r in rate[bad]
    ]
    return bad, f"{what} of {_examples(counters['name'][bad], texts)}"


def drop_implausible_counters(counters: pd.DataFrame, peaks: Peaks) -> tuple[pd.DataFrame, list[str]]:
    """`counters` (hybrid.profile.COUNTER_COLUMNS) with every implausible value set to NaN, and one
    warning naming what was dropped (none when all is plausible)."""
    out = counters.copy()
    found: list[str] = []
    for column in (c for c in COUNT_COLUMNS + PERCENT_COLUMNS if c in out):
        values = out[column].astype(float)
        limit = (
            100 * TOLERANCE
            if column in PERCENT_COLUMNS
            else MAX_SM_CLOCK_HZ
            if column == "sm_clock_hz"
            else np.inf
        )
        bad = (values < 0) | (values > limit) | np.isinf(values) | ((column == "duration_ns") & (values == 0))
        if bad.any():
            found.append(f"{column} of {_examples(out['name'][bad], [f'{v:g}' for v in values[bad]])}")
            out.loc[bad, column] = np.nan
    dram, text = _rate_limit(out, ("dram_read_bytes", "dram_write_bytes"), peaks.dram, "DRAM bytes", "B")
    if text:
        found.append(text)
        out.loc[dram, ["dram_read_bytes", "dram_write_bytes"]] = np.nan
    l2, text = _rate_limit(out, ("l2_bytes",), peaks.l2, "L2 bytes", "B")
    if text:
        found.append(text)
        out.loc[l2, "l2_bytes"] = np.nan
    known = [v for v in (peaks.flops(p) for p in peaks.flops_per_s) if v]
    top = max(known) if known else None
    for column in ("fp64_flops", "fp32_flops", "fp16_flops", "tensor_flops"):
        if column not in out:
            continue
        flops, text = _rate_limit(out, (column,), top, f"{column} (above the fastest peak)", "FLOP")
        if text:
            found.append(text)
            out.loc[flops, column] = np.nan
            if column == "tensor_flops":
                out.loc[flops, "tensor_flops_by_precision"] = None
    if not found:
        return counters, []
    return out, [
        "implausible ncu counter values dropped (a device cannot produce them; not shown as "
        "measured): " + " | ".join(found)
    ]


def implausible_rows(
    start_ns: np.ndarray, end_ns: np.ndarray, bounds: tuple[int, int] | None, sizes: np.ndarray | None = None
) -> np.ndarray:
    """Records (start, end[, bytes]) that cannot be measurements: ending before they start, outside the
    capture `bounds` (None: unknown), or with negative bytes."""
    bad = end_ns < start_ns
    if bounds is not None:
        bad |= (start_ns < bounds[0]) | (end_ns > bounds[1])
    if sizes is not None:
        bad |= sizes < 0
    return bad
