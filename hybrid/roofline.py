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
from hybrid.metrics import matched_counter_launches, op_bytes, op_flops, op_precision, steady_steps
from hybrid.profile import Profile, is_communication
from hybrid.provenance import ESTIMATED, MEASURED_NCU

# Points listed in results.json (the step point covers all of them).
MAX_POINTS = 30
# Layer points listed (resnet50 has 150+ module ranges; the largest 30 hold most of the forward time).
MAX_LAYER_POINTS = 30
# Precision assumed for scalar work when the point names none (PyTorch runs fp16 elementwise math as
# fp32 FMUL/FFMA: hopper-metrics.md).
DEFAULT_PRECISION = "fp32"


# The counter columns a kernel's roofline point is computed from.
WORK_COLUMNS = ("tensor_flops", "fp64_flops", "fp32_flops", "fp16_flops", "dram_read_bytes", "dram_write_bytes",
                "duration_ns")


def _matched_launches(profile: Profile, counted: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Kernel launches of the steady steps that stand for a profiled kernel (counter row, matched by launch
    or launch configuration as ncu_pass matched them), with their timeline time; and the number of steps."""
    steps = steady_steps(profile)
    n = max(len(steps), 1)
    matched = matched_counter_launches(profile, steps)
    if matched is None:
        kernels = profile.kernels
        return kernels.iloc[0:0].assign(counter_row=pd.Series(dtype=float), ns=pd.Series(dtype=float)), n
    return matched[matched["counter_row"].isin(counted.index)], n


def _counter_work(counted: pd.DataFrame) -> pd.DataFrame:
    """Per counter row (one replayed launch): FLOPs, DRAM and L2 bytes, ncu's duration, dominant precision."""
    tensor = counted["tensor_flops"].fillna(0)
    scalar = counted["fp64_flops"].fillna(0) + counted["fp32_flops"].fillna(0) + counted["fp16_flops"].fillna(0)

    def dominant(row) -> str:
        # Tensor work decides when there is any; else the scalar precision with the most FLOPs.
        by_p = dict(row["tensor_flops_by_precision"]) if isinstance(row["tensor_flops_by_precision"], dict) else {}
        if row["tensor"] > 0 and by_p:
            return max(by_p, key=lambda p: by_p[p] or 0)
        scalar_by_p = {p: np.nan_to_num(row[f"{p}_flops"]) for p in ("fp64", "fp32", "fp16")}
        best = max(scalar_by_p, key=scalar_by_p.get)
        return best if scalar_by_p[best] > 0 else DEFAULT_PRECISION

    frame = counted.assign(tensor=tensor)
    return pd.DataFrame({
        "name": counted["name"],
        "flops": (tensor + scalar).astype(float),
        "bytes": (counted["dram_read_bytes"].fillna(0) + counted["dram_write_bytes"].fillna(0)).astype(float),
        "l2_bytes": counted["l2_bytes"].astype(float),
        "time_ns": counted["duration_ns"].astype(float),
        "precision": frame.apply(dominant, axis=1) if len(frame) else pd.Series(dtype=object),
    }, index=counted.index)


def _points_from_counters(profile: Profile, counted: pd.DataFrame) -> pd.DataFrame:
    """One point per profiled kernel (counter row) that stands for launches in the steady steps: its
    counters per launch, and how many launches and how much timeline GPU time per step it covers."""
    matched, n = _matched_launches(profile, counted)
    if matched.empty:
        return pd.DataFrame()
    per_row = matched["ns"].groupby(matched["counter_row"]).agg(["size", "sum"])
    work = _counter_work(counted.loc[per_row.index])
    return pd.DataFrame({
        "name": work["name"].to_numpy(),
        "flops": work["flops"].to_numpy(float),
        "bytes": work["bytes"].to_numpy(float),
        "l2_bytes": work["l2_bytes"].to_numpy(float),
        "time_ns": work["time_ns"].to_numpy(float),
        "precision": work["precision"].to_numpy(),
        "source": MEASURED_NCU,
        "per_step": per_row["size"].to_numpy(float) / n,
        "step_time_ns": per_row["sum"].to_numpy(float) / n,
    })


def _points_from_layers(profile: Profile, counted: pd.DataFrame) -> pd.DataFrame:
    """One point per module range (the kernels' `layer`: innermost range at launch, forward only): the
    counters of every launch in it that stands for a profiled kernel, summed per step (each profiled
    kernel weighted by its launches per step, as the step point is), its rate over ncu's durations of
    those launches. `covered_pct` is the share of the layer's kernel time those launches take."""
    matched, n = _matched_launches(profile, counted)
    matched = matched[matched["layer"].notna()]
    if matched.empty:
        return pd.DataFrame()
    work = _counter_work(counted.loc[matched["counter_row"].unique()])
    per_launch = work.loc[matched["counter_row"]].set_index(matched.index).assign(
        layer=matched["layer"].astype(str), ns=matched["ns"].astype(float))
    by_layer = per_launch.groupby("layer", sort=False)
    totals = by_layer[["flops", "bytes", "l2_bytes", "time_ns", "ns"]].sum(min_count=1)
    # The precision that took most of the layer's time sets its compute roof.
    precision = per_launch.groupby(["layer", "precision"])["ns"].sum().reset_index() \
        .sort_values("ns", ascending=False).drop_duplicates("layer").set_index("layer")["precision"]
    steps = steady_steps(profile)
    in_layers = profile.kernels[profile.kernels["step"].isin(steps["step"]) & profile.kernels["layer"].notna()]
    layer_ns = (in_layers["end_ns"] - in_layers["start_ns"]).groupby(in_layers["layer"].astype(str)).sum()
    return pd.DataFrame({
        "name": totals.index.to_numpy(),
        "flops": totals["flops"].to_numpy(float) / n,
        "bytes": totals["bytes"].to_numpy(float) / n,
        "l2_bytes": totals["l2_bytes"].to_numpy(float) / n,
        "time_ns": totals["time_ns"].to_numpy(float) / n,
        "precision": precision.loc[totals.index].to_numpy(),
        "source": MEASURED_NCU,
        # Already per step, like op points.
        "per_step": 1.0,
        "step_time_ns": totals["ns"].to_numpy(float) / n,
        "launches_per_step": by_layer.size().loc[totals.index].to_numpy(float) / n,
        "covered_pct": 100 * totals["ns"].to_numpy(float) / layer_ns.loc[totals.index].to_numpy(float),
    })


def _points_from_ops(profile: Profile) -> pd.DataFrame:
    """One point per (op, shapes, dtypes) that ran kernels itself; FLOPs from torch, bytes modeled."""
    steps = steady_steps(profile)
    ops = profile.ops[profile.ops["step"].isin(steps["step"]) & (profile.ops["device_ns"] > 0)]
    ops = ops[~is_communication(ops["name"])]
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


def _layer_block(profile: Profile, counted: pd.DataFrame, peaks: Peaks) -> tuple[list[dict], str | None]:
    """The roofline's `layers` (largest MAX_LAYER_POINTS by time), or why there are none."""
    if counted.empty:
        # torch's FLOP estimates come per operator; its kernels carry no module, so no layer sums them.
        return [], "layer points need ncu counters (FLOPs and DRAM bytes of each layer's kernels)"
    if not profile.kernels["layer"].notna().any():
        return [], "no module ranges in this run (profile with --nvtx-modules)"
    points = _points_from_layers(profile, counted)
    points = points[(points["time_ns"] > 0) & (points["step_time_ns"] > 0)] if len(points) else points
    if points.empty:
        return [], "no kernel launched inside a module range was profiled by ncu"
    placed = _place(points, peaks).sort_values("step_time_ns", ascending=False).head(MAX_LAYER_POINTS)
    return [{"name": r.name, "ai": _finite(r.ai), "l2_ai": _finite(r.l2_ai), "flops_per_s": _finite(r.flops_per_s),
             "bytes_per_s": _finite(r.bytes_per_s), "time_ms": r.step_time_ns / 1e6,
             "kernels_per_step": r.launches_per_step, "covered_pct": float(r.covered_pct), "bound": r.bound,
             "precision": r.precision, "achieved_pct_of_attainable": _finite(r.achieved_pct), "source": r.source}
            for r in placed.itertuples(index=False)], None


def roofline(profile: Profile, peaks: Peaks) -> dict:
    """The `roofline` block of results.json."""
    empty = {"bound": None, "arithmetic_intensity": None, "ridge_point": None,
             "achieved_pct_of_attainable": None, "source": None, "kernels": [], "layers": []}
    if peaks.dram is None:
        return {**empty, "reason": "DRAM bandwidth of this GPU is unknown",
                "layers_reason": "DRAM bandwidth of this GPU is unknown"}
    # A kernel is placed from counters only where ncu read all of its work: a GEMM with no FLOP metric
    # would sit at AI 0 as if it did no math, a kernel without its write bytes or its duration above
    # its real rate (an n/a read as 0).
    counted = profile.counters[profile.counters[list(WORK_COLUMNS)].notna().all(axis=1)]
    if counted.empty and not profile.counters.empty and profile.ops.empty:
        lacking = [c for c in WORK_COLUMNS if profile.counters[c].isna().any()]
        return {**empty, "reason": f"ncu measured no kernel's full work (no value for {', '.join(lacking)})",
                "layers_reason": "no kernel with all of its work measured by ncu"}
    layers, layers_reason = _layer_block(profile, counted, peaks)
    empty = {**empty, "layers": layers, **({"layers_reason": layers_reason} if layers_reason else {})}
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
        "layers": layers,
        **({"layers_reason": layers_reason} if layers_reason else {}),
    }

