"""Hardware counters (ncu's per-kernel rows) aggregated per steady step: which launches each counter row
stands for, and the averages, DRAM traffic and FLOPs of the profiled kernels weighted by the GPU time they
stand for. Each figure is tagged measured:ncu.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from hybrid.analysis.kernel_classes import MATMUL_KINDS, per_kernel, profile_kernel_classes
from hybrid.hardware import Peaks
from hybrid.profile import MEASURED_MATCHES, Profile
from hybrid.provenance import MEASURED_NCU, Metric
from nsight.ncu import function_base_name


def _weighted(values: pd.Series, weights: pd.Series) -> float | None:
    ok = values.notna() & weights.notna()
    if not ok.any() or weights[ok].sum() == 0:
        return None
    return float((values[ok] * weights[ok]).sum() / weights[ok].sum())


def matched_counter_launches(profile: Profile, steps: pd.DataFrame) -> pd.DataFrame | None:
    """Kernel launches of `steps` that stand for a profiled kernel (its counter row, matched by launch or
    launch configuration as hybrid.load.ncu_match matched them), with their timeline GPU time `ns`; None
    when the counters were attached to no kernel frame."""
    kernels = profile.kernels.reset_index(drop=True)
    per_kernel = profile.kernel_counters
    if "counters" not in profile.sources or len(per_kernel) != len(kernels):
        return None
    matched = kernels.assign(
        counter_row=per_kernel["counter_row"].to_numpy(),
        match=per_kernel["counter_match"].to_numpy(),
        ns=kernels["end_ns"] - kernels["start_ns"],
    )
    return matched[matched["match"].isin(MEASURED_MATCHES) & matched["step"].isin(steps["step"])]


def counter_launches(profile: Profile, steps: pd.DataFrame) -> pd.DataFrame:
    """Per counter row (position in profile.counters): how many launches per steady step it stands for
    and their timeline GPU time per step (`launches`, `time_ns`), matched by launch or launch
    configuration as ncu_pass matches them and as the roofline's step point counts them. ncu replays
    one launch per row, so an average over rows gives a kernel launched 100 times a step the weight of
    one launched once. Rows that stand for no launch in the steady steps weigh 0; with no timeline
    match at all (counters attached to no kernel frame), each row counts once at its replayed duration."""
    c = profile.counters.reset_index(drop=True)
    fallback = pd.DataFrame({"launches": 1.0, "time_ns": c["duration_ns"].astype(float)})
    matched = matched_counter_launches(profile, steps)
    if matched is None or matched.empty:
        return fallback
    per_row = matched["ns"].groupby(matched["counter_row"]).agg(["size", "sum"])
    per_row = per_row.reindex(range(len(c)), fill_value=0).astype(float) / max(len(steps), 1)
    return pd.DataFrame({"launches": per_row["size"], "time_ns": per_row["sum"]})


# Averages of per-kernel ncu figures: (metric name, counter column, unit).
COUNTER_AVERAGES = (
    ("ncu_l2_hit_pct", "l2_hit_pct", "%"),
    ("ncu_l1_hit_pct", "l1_hit_pct", "%"),
    ("ncu_tensor_pipe_pct", "tensor_pipe_pct", "%"),
    ("ncu_sm_throughput_pct", "sm_throughput_pct", "%"),
    ("ncu_memory_throughput_pct", "memory_throughput_pct", "%"),
    ("ncu_achieved_occupancy_pct", "achieved_occupancy_pct", "%"),
    ("ncu_sectors_per_request", "global_load_sectors_per_request", "sectors/req"),
)


# 4 sectors (32 B each) per request is a fully coalesced warp of 4-byte loads; twice that means half of every
# fetched sector is wasted (hopper-metrics.md; hybrid.ledger.shortfall classes kernels so).
UNCOALESCED_SECTORS_PER_REQUEST = 8.0
# Kernels that load through an index tensor (index_select, gather, scatter, embedding, take): their loads are
# as coalesced as the indices are ordered, whatever the tensors' layout (mem_random_gather's
# _scatter_gather_elementwise_kernel: 20 sectors a request).
INDEXED_LOADS = re.compile(r"gather|scatter|index|embedding|take", re.IGNORECASE)


def _uncoalesced(c: pd.DataFrame, weights: pd.Series, classes: pd.DataFrame) -> dict[str, Metric]:
    """The memory-bound kernels whose loads are uncoalesced, by their step time (`ncu_uncoalesced_kernels`),
    and the share of that time in kernels that load through an index (`ncu_uncoalesced_indexed_pct`).
    GEMMs are left out: their tiles load 16-byte vectors (a coalesced warp reads 16 sectors a request), and
    the ledger gives their time to the GEMM causes first (sync_cuda_synchronize's TF32 GEMM read 66% of
    such a list)."""
    kinds = per_kernel(c["name"].astype(str), classes, "kind")
    mask = (c["global_load_sectors_per_request"].fillna(0.0) >= UNCOALESCED_SECTORS_PER_REQUEST) & ~np.isin(
        kinds, (*MATMUL_KINDS, "gemv")
    )
    time = weights[mask].astype(float)
    total = float(time.sum())
    if total <= 0:
        return {}
    names = c.loc[mask, "name"].astype(str).map(function_base_name)
    by_name = time.groupby(names.to_numpy()).sum().sort_values(ascending=False)
    listed = ", ".join(f"{name} {100 * ns / total:.0f}%" for name, ns in by_name.iloc[:3].items())
    indexed = float(by_name[by_name.index.str.contains(INDEXED_LOADS)].sum())
    return {
        "ncu_uncoalesced_kernels": Metric(
            listed + (f" (+{len(by_name) - 3} more)" if len(by_name) > 3 else ""), "", MEASURED_NCU
        ),
        "ncu_uncoalesced_indexed_pct": Metric(100 * indexed / total, "%", MEASURED_NCU),
    }


def _counter_average(c: pd.DataFrame, col: str, weights: pd.Series) -> float | None:
    return _weighted(c[col].clip(upper=100) if col.endswith("_pct") else c[col], weights)


def _gemm_tensor_pipe(c: pd.DataFrame, weights: pd.Series, classes: pd.DataFrame) -> dict[str, Metric]:
    """Tensor-pipe use of the profiled GEMM/conv kernels alone (elementwise kernels around them would
    dilute it), and of those not FP32 (hybrid.analysis.kernel_classes: measured where ncu counted their
    FLOPs): FP32 GEMMs
    cannot use the tensor pipe at all, which the FP32 finding already explains; the rest is what the
    idle-pipe finding judges."""
    names = c["name"].astype(str)
    gemm = pd.Series(np.isin(per_kernel(names, classes, "kind"), MATMUL_KINDS), index=c.index)
    not_fp32 = pd.Series(per_kernel(names, classes, "precision") != "fp32", index=c.index)
    out: dict[str, Metric] = {}
    for name, mask in (
        ("ncu_gemm_tensor_pipe_pct", gemm),
        ("ncu_non_fp32_gemm_tensor_pipe_pct", gemm & not_fp32),
    ):
        value = _counter_average(c[mask], "tensor_pipe_pct", weights[mask])
        if value is not None:
            out[name] = Metric(value, "%", MEASURED_NCU)
    return out


def counter_metrics(profile: Profile, steps: pd.DataFrame, peaks: Peaks) -> dict[str, Metric]:
    c = profile.counters.reset_index(drop=True)
    if c.empty:
        return {}
    src = MEASURED_NCU
    out: dict[str, Metric] = {}
    # One computation, made where the counters are matched to the launches (ncu_pass.attach_counters):
    # the share of measured GPU time whose launch matched a profiled one, which its warning quotes too.
    coverage = (profile.extras.get("ncu") or {}).get("covered_gpu_time_pct")
    if coverage is not None:
        out["ncu_coverage_pct"] = Metric(float(coverage), "%", src)
    per_step = counter_launches(profile, steps)
    weights = per_step["time_ns"]
    for name, col, unit in COUNTER_AVERAGES:
        value = _counter_average(c, col, weights)
        if value is not None:
            out[name] = Metric(value, unit, src)
    classes = profile_kernel_classes(profile, c["name"], peaks)
    out.update(_gemm_tensor_pipe(c, weights, classes))
    out.update(_uncoalesced(c, weights, classes))
    dram = c["dram_read_bytes"] + c["dram_write_bytes"]
    # A kernel's n/a read as 0 bytes would pass a partial sum off as the measured total.
    if dram.notna().all() and c["duration_ns"].notna().all():
        out["ncu_dram_bytes"] = Metric(float(dram.sum()), "B", src)
        # Bytes and duration of each replayed launch, counted as often as its kernel runs in a step.
        launches = per_step["launches"]
        moved_ns = float((c["duration_ns"].fillna(0) * launches).sum())
        out["ncu_dram_bytes_per_s"] = Metric(
            float((dram * launches).sum() / (moved_ns / 1e9)) if moved_ns else 0.0, "B/s", src
        )
    by_precision: dict[str, float] = {}
    for d in c["tensor_flops_by_precision"].dropna():
        for p, v in dict(d).items():
            if v is not None and np.isfinite(v):
                by_precision[p] = by_precision.get(p, 0.0) + float(v)
    for p, v in by_precision.items():
        out[f"ncu_tensor_flops_{p}"] = Metric(v, "FLOP", src)
    for col in ("fp64_flops", "fp32_flops", "fp16_flops", "tensor_flops"):
        if c[col].notna().all():
            out[f"ncu_{col}"] = Metric(float(c[col].sum()), "FLOP", src)
    return out
