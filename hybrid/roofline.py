"""Roofline placement per kernel (ncu counters: measured) or per op (torch FLOPs and shapes:
estimated), and for the step as a whole, duration-weighted.

attainable = min(peak FLOP/s of the point's precision, AI x DRAM bandwidth); a point is memory
bound when its AI is left of the ridge (peak / bandwidth). Without FLOPs (nsys only, no ncu, no
torch ops) there is nothing to place and the block says so instead of inventing points.

`time_ms` (of the step and of each point) is the kernel time per steady step that the point covers,
read off the timeline: for counters, the GPU time of every kernel launch matched to a profiled one
(by launch or launch configuration, as ncu_pass matches them), so the step's time_ms is
kernel_time_ms x ncu_coverage_pct (over the same steps); for ops, the GPU time of their kernels. A
point's rates (FLOP/s, B/s, % of attainable) are those its source measured: ncu's own duration for
the counters it read, the timeline for ops. The step point sums each profiled kernel's FLOPs and bytes
once per launch it stands for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.hardware import Peaks
from hybrid.metrics import op_bytes, op_flops, op_precision, steady_steps
from hybrid.ncu_pass import MATCH_CONFIG, MATCH_LAUNCH
from hybrid.profile import Profile
from hybrid.provenance import ESTIMATED, MEASURED_NCU

# Points listed in results.json (the step point covers all of them).
MAX_POINTS = 30
# Precision assumed for scalar work when the point names none (PyTorch runs fp16 elementwise math as
# fp32 FMUL/FFMA: hopper-metrics.md).
DEFAULT_PRECISION = "fp32"


def _points_from_counters(profile: Profile, counted: pd.DataFrame) -> pd.DataFrame:
    """One point per profiled kernel (counter row) that stands for launches in the steady steps: its
    counters per launch, and how many launches and how much timeline GPU time per step it covers."""
    ncu = profile.extras.get("ncu") or {}
    kernels = profile.kernels.reset_index(drop=True)
    rows, levels = ncu.get("kernel_counter_rows"), ncu.get("kernel_match")
    if rows is None or len(rows) != len(kernels):
        return pd.DataFrame()
    steps = steady_steps(profile)
    matched = kernels.assign(counter_row=rows, match=levels)
    matched = matched[matched["match"].isin([MATCH_LAUNCH, MATCH_CONFIG]) & matched["step"].isin(steps["step"])
                      & matched["counter_row"].isin(counted.index)]
    if matched.empty:
        return pd.DataFrame()
    n = max(len(steps), 1)
    per_row = (matched["end_ns"] - matched["start_ns"]).groupby(matched["counter_row"]).agg(["size", "sum"])
    c = counted.loc[per_row.index]
    tensor = c["tensor_flops"].fillna(0)
    scalar = c["fp64_flops"].fillna(0) + c["fp32_flops"].fillna(0) + c["fp16_flops"].fillna(0)

    def dominant(row) -> str:
        # Tensor work decides when there is any; else the scalar precision with the most FLOPs.
        by_p = dict(row["tensor_flops_by_precision"]) if isinstance(row["tensor_flops_by_precision"], dict) else {}
        if row["tensor"] > 0 and by_p:
            return max(by_p, key=lambda p: by_p[p] or 0)
        scalar_by_p = {p: np.nan_to_num(row[f"{p}_flops"]) for p in ("fp64", "fp32", "fp16")}
        best = max(scalar_by_p, key=scalar_by_p.get)
        return best if scalar_by_p[best] > 0 else DEFAULT_PRECISION

    frame = c.assign(tensor=tensor)
    return pd.DataFrame({
        "name": c["name"].to_numpy(),
        "flops": (tensor + scalar).to_numpy(float),
        "bytes": (c["dram_read_bytes"].fillna(0) + c["dram_write_bytes"].fillna(0)).to_numpy(float),
        "l2_bytes": c["l2_bytes"].to_numpy(float),
        "time_ns": c["duration_ns"].to_numpy(float),
        "precision": frame.apply(dominant, axis=1).to_numpy() if len(frame) else np.empty(0, object),
        "source": MEASURED_NCU,
        "per_step": per_row["size"].to_numpy(float) / n,
        "step_time_ns": per_row["sum"].to_numpy(float) / n,
    })


def _points_from_ops(profile: Profile) -> pd.DataFrame:
    """One point per (op, shapes, dtypes) that ran kernels itself; FLOPs from torch, bytes modeled."""
    steps = steady_steps(profile)
    ops = profile.ops[profile.ops["step"].isin(steps["step"]) & (profile.ops["device_ns"] > 0)]
    if ops.empty:
        return pd.DataFrame()
    key = ops["name"] + "|" + ops["shapes"].astype(str) + "|" + ops["dtypes"].astype(str)
    flops = [op_flops(name, shapes, f) for name, shapes, f in zip(ops["name"], ops["shapes"], ops["flops"])]
    grouped = ops.assign(key=key, flops=flops).groupby("key", sort=False)
    first = grouped.head(1).set_index("key")
    agg = grouped.agg(calls=("name", "size"), flops=("flops", "sum"), time_ns=("device_ns", "sum"))
    per_call = pd.Series({k: op_bytes(name, shapes, dtypes) for k, name, shapes, dtypes
                          in zip(first.index, first["name"], first["shapes"], first["dtypes"])})
    n = max(len(steps), 1)
    return pd.DataFrame({
        "name": first.loc[agg.index, "name"].to_numpy(),
        "flops": agg["flops"].to_numpy(float) / n,
        "bytes": per_call.loc[agg.index].to_numpy(float) * agg["calls"].to_numpy() / n,
        "l2_bytes": np.nan,
        "time_ns": agg["time_ns"].to_numpy(float) / n,
        "precision": [(op_precision(d) or DEFAULT_PRECISION) for d in first.loc[agg.index, "dtypes"]],
        "source": ESTIMATED,
        # Already per step: each point is its op's work and time per step.
        "per_step": 1.0,
        "step_time_ns": agg["time_ns"].to_numpy(float) / n,
    })


def _place(points: pd.DataFrame, peaks: Peaks) -> pd.DataFrame:
    bw = peaks.dram
    peak = points["precision"].map(lambda p: peaks.flops(p) or peaks.flops(DEFAULT_PRECISION) or np.nan).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ai = np.where(points["bytes"] > 0, points["flops"] / points["bytes"], np.inf)
        attainable = np.minimum(peak, ai * bw)
        flops_per_s = points["flops"] / (points["time_ns"] / 1e9)
        bytes_per_s = points["bytes"] / (points["time_ns"] / 1e9)
        # A zero-FLOP point (a copy kernel) is judged by the bandwidth it reached.
        achieved_pct = np.where(points["flops"] > 0, 100 * flops_per_s / attainable, 100 * bytes_per_s / bw)
        l2_ai = points["flops"] / points["l2_bytes"]
    ridge = peak / bw
    return points.assign(ai=ai, l2_ai=l2_ai, ridge=ridge, flops_per_s=flops_per_s, bytes_per_s=bytes_per_s,
                         achieved_pct=achieved_pct, bound=np.where(ai < ridge, "memory", "compute"))


def _finite(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def roofline(profile: Profile, peaks: Peaks) -> dict:
    """The `roofline` block of results.json."""
    empty = {"bound": None, "arithmetic_intensity": None, "ridge_point": None,
             "achieved_pct_of_attainable": None, "source": None, "kernels": []}
    if peaks.dram is None:
        return {**empty, "reason": "DRAM bandwidth of this GPU is unknown"}
    # A kernel is placed from counters only where ncu read both its tensor FLOPs and its DRAM bytes:
    # a GEMM with no FLOP metric would otherwise sit at AI 0 as if it did no math.
    counted = profile.counters[profile.counters["tensor_flops"].notna() & profile.counters["dram_read_bytes"].notna()]
    if not counted.empty:
        points = _points_from_counters(profile, counted)
        if points.empty:
            return {**empty, "reason": "no profiled kernel matches a launch in the measured steps"}
    elif not profile.ops.empty:
        points = _points_from_ops(profile)
    else:
        return {**empty, "reason": "no FLOP counts: run with ncu (--mode hybrid) or the torch pass"}
    points = points[(points["time_ns"] > 0) & (points["step_time_ns"] > 0)] if len(points) else points
    if points.empty:
        return {**empty, "reason": "no kernel time to place"}
    placed = _place(points, peaks)
    time = placed["step_time_ns"]
    dominant = time.groupby(placed["precision"]).sum().idxmax()
    ridge = (peaks.flops(dominant) or peaks.flops(DEFAULT_PRECISION) or np.nan) / peaks.dram
    per_step = placed["per_step"]
    flops, nbytes = (placed["flops"] * per_step).sum(), (placed["bytes"] * per_step).sum()
    rate_ns = (placed["time_ns"] * per_step).sum()
    ai = flops / nbytes if nbytes else np.inf
    achieved = float((placed["achieved_pct"].clip(upper=100) * time).sum() / time.sum())
    l2_total = (placed["l2_bytes"] * per_step).sum(min_count=1)
    source = placed["source"].iloc[0]
    top = placed.sort_values("step_time_ns", ascending=False).head(MAX_POINTS)
    kernels = [{"name": r.name, "ai": _finite(r.ai), "l2_ai": _finite(r.l2_ai), "flops_per_s": _finite(r.flops_per_s),
                "bytes_per_s": _finite(r.bytes_per_s), "time_ms": r.step_time_ns / 1e6, "calls_per_step": r.per_step,
                "bound": r.bound, "precision": r.precision, "achieved_pct_of_attainable": _finite(r.achieved_pct),
                "source": r.source}
               for r in top.itertuples(index=False)]
    return {
        "bound": "memory" if ai < ridge else "compute",
        "arithmetic_intensity": _finite(ai),
        "l2_arithmetic_intensity": _finite(flops / l2_total) if pd.notna(l2_total) and l2_total else None,
        "ridge_point": _finite(ridge),
        "precision": dominant,
        "achieved_pct_of_attainable": achieved,
        "flops_per_s": _finite(flops / (rate_ns / 1e9)),
        "bytes_per_s": _finite(nbytes / (rate_ns / 1e9)),
        "time_ms": float(time.sum() / 1e6),
        "memory_bound_time_pct": float(100 * time[placed["bound"] == "memory"].sum() / time.sum()),
        "source": source,
        "kernels": kernels,
    }

