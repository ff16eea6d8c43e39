"""The figures a rule's fix reads from this run and this GPU beyond its finding (hybrid.rules.base.FixInputs):
the GEMM speedups calibrated on the GPU and the pinned copy rate."""

from __future__ import annotations

import numpy as np

from hybrid.numbers import significant as fmt
from hybrid.replay.calibrate import timed_rows, weighted_speedup
from hybrid.replay.graph import MEMCPY, ReplayGraph

# Copies this large show the link's pinned bandwidth (smaller ones are latency-bound).
PINNED_SAMPLE_MIN_BYTES = 1 << 20


def calibrated_speedup(calibration: dict | None, dtype: str, variant: str) -> tuple[float, str] | None:
    """Share-weighted speedup of `variant` over the current precision across the calibrated shapes
    of `dtype`, and the evidence text for the top shape."""
    if not calibration or _on_cpu(calibration) or not (rows := timed_rows(calibration, dtype, variant)):
        return None
    speedup = weighted_speedup(rows, variant)
    top = max(rows, key=lambda r: float(r.get("share") or 0.0))
    # The run's own time per call of that shape (where recorded) tells whether the timed kernel is the one
    # that ran.
    in_run = top.get("run_us")
    ran = f"; {fmt(in_run)} µs a call in the run" if isinstance(in_run, (int, float)) and in_run > 0 else ""
    basis = (
        f"measured on this GPU ({calibration.get('device', 'unknown')}): "
        f"{top['key']} {fmt(top['us']['current'])} -> {fmt(top['us'][variant])} µs ({variant}{ran}); "
        f"{fmt(speedup)}x over {len(rows)} shape(s)"
    )
    return speedup, basis


def _on_cpu(calibration: dict) -> bool:
    """A calibration timed on the CPU (hybrid.collect.microbench.device_key): never a GPU's speedups."""
    return str(calibration.get("device", "")).startswith("cpu |")


def calibration_status(calibration: dict | None) -> str:
    """What the run's calibration holds, for a fix that found no speedup in it: why the pass did not run
    (`not_run`, hybrid.pipeline.read_calibration), or which shapes it timed."""
    if not calibration:
        return "no calibration in this analysis"
    if calibration.get("not_run"):
        return str(calibration["not_run"])
    if _on_cpu(calibration):
        return "the calibration was timed on the CPU (--device cpu): not a GPU's speedups"
    rows = calibration.get("shapes") or []
    if not rows:
        return f"the calibration timed no shape ({calibration.get('note') or 'none found'})"
    dtypes = sorted({str(r.get("dtype")) for r in rows})
    return f"the calibration timed {len(rows)} shape(s), all {'/'.join(dtypes)}" + (
        f"; not timed: {calibration['untimed'][0].get('why')}" if calibration.get("untimed") else ""
    )


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
    if isinstance(measured, (int, float)) and measured > 0:
        return float(measured), f"measured on this GPU: pinned host->device copy {fmt(measured / 1e9)} GB/s"
    spec = (peaks or {}).get("pinned_copy_bytes_per_s")
    if spec:
        return float(
            spec
        ), f"the host link's datasheet rate (no pinned copy measured): {fmt(spec / 1e9)} GB/s"
    return None
