"""The figures a rule's fix reads from this run and this GPU beyond its finding (hybrid.rules.base.FixInputs):
the GEMM speedups calibrated on the GPU and the pinned copy rate."""

from __future__ import annotations

import numpy as np

from hybrid.numbers import significant as fmt
from hybrid.replay.graph import MEMCPY, ReplayGraph

# Copies this large show the link's pinned bandwidth (smaller ones are latency-bound).
PINNED_SAMPLE_MIN_BYTES = 1 << 20


def calibrated_speedup(calibration: dict | None, dtype: str, variant: str) -> tuple[float, str] | None:
    """Share-weighted speedup of `variant` over the current precision across the calibrated shapes
    of `dtype`, and the evidence text for the top shape."""
    if not calibration:
        return None
    rows = [
        r
        for r in calibration.get("shapes", [])
        if r.get("dtype") == dtype and r.get("us", {}).get("current") and r["us"].get(variant)
    ]
    if not rows:
        return None
    shares = np.array([max(r.get("share", 0.0), 1e-9) for r in rows])
    ratio = np.array([r["us"][variant] / r["us"]["current"] for r in rows])
    # Each shape keeps its share of the GEMM time, shrunk by its own ratio.
    speedup = float(shares.sum() / (shares * ratio).sum())
    top = rows[int(np.argmax(shares))]
    basis = (
        f"measured on this GPU ({calibration.get('device', 'unknown')}): {top['key']} "
        f"{fmt(top['us']['current'])} -> {fmt(top['us'][variant])} µs ({variant}); {fmt(speedup)}x over "
        f"{len(rows)} shape(s)"
    )
    return speedup, basis


def pinned_bandwidth(
    graph: ReplayGraph, calibration: dict | None, peaks: dict | None
) -> tuple[float, str] | None:
    """The pinned host->device rate a fix can assume, and where it came from: this run's own large pinned
    copies, else the rate calibrated on this GPU, else the link's datasheet rate."""
    big = (
        (graph.d_kind == MEMCPY)
        & np.array([p is True for p in graph.d_pinned])
        & (graph.d_bytes >= PINNED_SAMPLE_MIN_BYTES)
    )
    if big.any():
        rate = float(graph.d_bytes[big].sum() / graph.d_dur[big].sum() * 1e9)
        return rate, f"this run's pinned copies: {fmt(rate / 1e9)} GB/s"
    measured = (calibration or {}).get("pinned_copy_bytes_per_s")
    if measured:
        return float(measured), f"measured on this GPU: pinned host->device copy {fmt(measured / 1e9)} GB/s"
    spec = (peaks or {}).get("pinned_copy_bytes_per_s")
    if spec:
        return float(
            spec
        ), f"the host link's datasheet rate (no pinned copy measured): {fmt(spec / 1e9)} GB/s"
    return None
