"""Which transformation replays a finding: from its results-level id and evidence, the run's graph
and the calibration measured on this GPU, a Fix, or None (with the reason) when no replay applies
and the rule's closed-form figure stands."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid.replay.graph import MEMCPY, ReplayGraph
from hybrid.replay.transforms import Fix
from hybrid.report.units import significant as fmt

NS_PER_MS = 1e6
# Copies this large show the link's pinned bandwidth (smaller ones are latency-bound).
PINNED_SAMPLE_MIN_BYTES = 1 << 20


@dataclass(frozen=True)
class Choice:
    fix: Fix | None
    reason: str  # why no replay, when fix is None


def evidence_value(finding: dict, label: str) -> float | str | None:
    for item in finding.get("evidence", []):
        if item.get("label") == label:
            return item.get("value")
    return None


def _number(finding: dict, label: str) -> float | None:
    value = evidence_value(finding, label)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def calibrated_speedup(calibration: dict | None, dtype: str, variant: str) -> tuple[float, str] | None:
    """Share-weighted speedup of `variant` over the current precision across the calibrated shapes
    of `dtype`, and the evidence text for the top shape."""
    if not calibration:
        return None
    rows = [r for r in calibration.get("shapes", []) if r.get("dtype") == dtype
            and r.get("us", {}).get("current") and r["us"].get(variant)]
    if not rows:
        return None
    shares = np.array([max(r.get("share", 0.0), 1e-9) for r in rows])
    ratio = np.array([r["us"][variant] / r["us"]["current"] for r in rows])
    # Each shape keeps its share of the GEMM time, shrunk by its own ratio.
    speedup = float(shares.sum() / (shares * ratio).sum())
    weights = shares
    top = rows[int(np.argmax(weights))]
    basis = (f"measured on this GPU ({calibration.get('device', 'unknown')}): {top['key']} "
             f"{fmt(top['us']['current'])} -> {fmt(top['us'][variant])} µs ({variant}); {fmt(speedup)}x over "
             f"{len(rows)} shape(s)")
    return speedup, basis


def _pinned_bandwidth(graph: ReplayGraph, calibration: dict | None, peaks: dict | None) -> tuple[float, str] | None:
    big = (graph.d_kind == MEMCPY) & np.array([p is True for p in graph.d_pinned]) & \
        (graph.d_bytes >= PINNED_SAMPLE_MIN_BYTES)
    if big.any():
        rate = float(graph.d_bytes[big].sum() / graph.d_dur[big].sum() * 1e9)
        return rate, f"this run's pinned copies: {fmt(rate / 1e9)} GB/s"
    measured = (calibration or {}).get("pinned_copy_bytes_per_s")
    if measured:
        return float(measured), f"measured on this GPU: pinned host->device copy {fmt(measured / 1e9)} GB/s"
    spec = (peaks or {}).get("pinned_copy_bytes_per_s")
    if spec:
        return float(spec), f"the host link's datasheet rate (no pinned copy measured): {fmt(spec / 1e9)} GB/s"
    return None


def choose(finding: dict, graph: ReplayGraph, *, calibration: dict | None = None, peaks: dict | None = None,
           torch_to_nsys: float = 1.0) -> Choice:
    """The Fix that replays `finding` (results.json form). `torch_to_nsys` converts a duration the
    torch pass measured to the nsys timeline (the ratio of their step times)."""
    fid = finding.get("id", "")
    if finding.get("not_measured"):
        return Choice(None, "not measured")
    if fid == "tensor.fp32_gemm":
        found = calibrated_speedup(calibration, "fp32", "tf32")
        if found is None:
            return Choice(None, "no GEMM speedup measured on this GPU (run `python -m hybrid.replay.calibrate RUN_DIR`)")
        return Choice(Fix("faster_gemms", "FP32 GEMMs/convolutions on TF32 tensor cores",
                          {"speedup": found[0], "precisions": ("fp32",)}, found[1]), "")
    if fid == "tensor.misaligned_dims":
        speedups = [s for s in (calibrated_speedup(calibration, "fp16", "fp16_aligned"),
                                calibrated_speedup(calibration, "bf16", "bf16_aligned")) if s]
        if not speedups:
            return Choice(None, "no aligned-shape speedup measured on this GPU")
        speedup, basis = speedups[0]
        return Choice(Fix("faster_gemms", "GEMM dims padded to multiples of 8",
                          {"speedup": speedup, "precisions": ("fp16", "bf16")}, basis), "")
    if fid in ("sync.per_step", "comm.host_sync"):
        return Choice(Fix("no_syncs", "no host waits inside the step (values kept on the device)", {},
                          "the step's measured syncs and blocking reads"), "")
    if fid == "copy.pageable":
        rate = _pinned_bandwidth(graph, calibration, peaks)
        if rate is None:
            return Choice(None, "no pinned copy bandwidth known for this machine")
        return Choice(Fix("pinned_copies", "pinned host memory and non_blocking copies", {"bytes_per_s": rate[0]},
                          rate[1]), "")
    if fid == "data.loader_stall":
        fetch = _number(finding, "host time fetching a batch")
        if not fetch:
            return Choice(None, "no batch fetch time in the evidence")
        return Choice(Fix("less_host_work", "batches fetched by DataLoader workers",
                          {"saved_ns_per_step": fetch * NS_PER_MS * torch_to_nsys},
                          f"the batch fetch the torch pass measured: {fmt(fetch)} ms per step"), "")
    if fid == "cpu.preprocessing":
        idle = _number(finding, "GPU idle, host busy with no launch")
        if not idle:
            return Choice(None, "no host-only time in the evidence")
        # The rule may leave part of that idle time to other findings (a sync, graph breaks): the
        # same share of the host work is what the fix (moving it to the GPU, capturing it) removes.
        share = min(1.0, (finding.get("time_lost_ms") or 0.0) / idle)
        return Choice(Fix("less_host_work", "the host work between launches removed", {"share": share},
                          f"{share:.0%} of the step's measured host work between launches (gaps over 0.1 ms): "
                          f"the rule's {fmt(finding.get('time_lost_ms') or 0.0)} of {fmt(idle)} ms of host work "
                          "with the GPU idle"), "")
    if fid == "compile.graph_breaks":
        return _rule_saving(finding, "less_host_work", "graph breaks removed (one compiled region)",
                            "host time between compiled regions: the rule's estimate",
                            "no host time between compiled regions")
    if fid == "launch.bound":
        return Choice(Fix("graph_launch", "CUDA graphs (torch.compile mode=\"reduce-overhead\")", {},
                          "the step's measured launch calls and dispatch gaps"), "")
    if fid == "compile.fusible_elementwise":
        return Choice(Fix("fused_elementwise", "elementwise chains fused (torch.compile)", {},
                          "the step's measured elementwise chains"), "")
    if fid == "comm.exposed":
        return Choice(Fix("overlapped_communication", "collectives overlapped with compute", {},
                          "the step's measured collectives"), "")
    if fid in ("memory.uncoalesced", "occupancy.small_grid", "occupancy.low", "roofline.low_efficiency"):
        return _rule_saving(finding, "faster_kernels", "the rule's kernel-time saving, replayed",
                            "kernel time saved: the rule's closed-form estimate", "no kernel time saved")
    return Choice(None, "no transformation for this finding")


def _rule_saving(finding: dict, kind: str, description: str, basis: str, none_reason: str) -> Choice:
    """A fix that removes the rule's own closed-form saving per step: for causes the replay cannot
    rebuild from the timeline (a graph break's host time, a kernel made faster)."""
    saved = finding.get("time_lost_ms") or 0.0
    if saved <= 0:
        return Choice(None, none_reason)
    return Choice(Fix(kind, description, {"saved_ns_per_step": saved * NS_PER_MS},
                      f"{basis}, {fmt(saved)} ms per step"), "")
