"""Roofline placement per kernel (ncu counters: measured) or per op (torch FLOPs and shapes:
estimated), and for the step as a whole, duration-weighted.

attainable = min(compute ceiling, AI x DRAM bandwidth); a point is memory bound when its AI is left of
the ridge (ceiling / bandwidth). A counter point's compute ceiling comes from its measured FLOP mix
(hybrid.analysis.kernel_classes.compute_ceiling: the rate at which its FLOPs on each pipe, tensor
bf16/fp16/tf32/fp8/fp64
and scalar fp32/fp64/fp16, finish with every pipe at its peak); an op point's from its op's precision (an
fp32 matmul or convolution that ran TF32 kernels, by the run's configuration or the kernel names, meets
the TF32 roof). The step's precision mix is its FLOPs by precision (each point's FLOPs times the launches
per step it stands for), and its ceiling what the hardware reaches on that mix: its FLOPs over the time its
kernels need one after another, each at its own ceiling (`ceiling_method` says so in words). Shares of
kernel time called resnet50's step "fp32 88%, tf32 12%" where most of its FLOPs are TF32. A point above
its own ceiling contradicts the peaks or the counters: it is left out of the points and listed in
`above_ceiling`.
Without FLOPs (nsys only, no ncu, no torch ops) there is nothing to place and the block says so instead of
inventing points.

`time_ms` (of the step and of each point) is the kernel time per steady step that the point covers,
read off the timeline: for counters, the GPU time of every kernel launch matched to a profiled one
(by launch or launch configuration, as ncu_pass matches them), so the step's time_ms is
kernel_time_ms x ncu_coverage_pct (over the same steps); for ops, the GPU time of their kernels. A
point's rates (FLOP/s, B/s, % of attainable) are those its source measured: ncu's own duration for
the counters it read, the timeline for ops. The step point sums each profiled kernel's FLOPs and bytes
once per launch it stands for.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from hybrid.analysis.counters import matched_counter_launches
from hybrid.analysis.kernel_classes import (
    FROM_NAME,
    compute_ceiling,
    dominant_pipe,
    flops_by_pipe,
    pipe_precision,
    profile_kernel_classes,
)
from hybrid.analysis.op_cost import CONV_BACKWARD_OP, CONV_OPS, MATMUL_OPS, op_bytes, op_precision, ops_flops
from hybrid.analysis.steps import steady_steps
from hybrid.hardware import Peaks
from hybrid.numbers import NS_PER_MS
from hybrid.profile import LAUNCH_CONFIG_COLUMNS, Profile, is_communication
from hybrid.provenance import ESTIMATED, MEASURED_NCU

# Points listed in results.json (the step point covers all of them).
MAX_POINTS = 30
# Layer points listed (resnet50 has 150+ module ranges; the largest 30 hold most of the forward time).
MAX_LAYER_POINTS = 30
# Precision assumed for scalar work when the point names none (PyTorch runs fp16 elementwise math as
# fp32 FMUL/FFMA: hopper-metrics.md).
DEFAULT_PRECISION = "fp32"
# A counter point may sit this far above its ceiling before it counts as contradicting it: ncu's duration
# and its FLOP counters come from separate replay passes of the kernel (a few % apart on short kernels).
CEILING_TOLERANCE = 0.02
PIPE_PREFIX = "pipe:"
# Matmul and convolution ops that still have no FLOPs after op_cost.ops_flops (a backend's own
# convolution op torch counts nothing for, outside an op it counted). Placed by their bytes alone they
# would read as memory-bound kernels far below the roofline; they are left out instead.
UNCOUNTED_MATMUL_OP = re.compile(r"conv|mm\b|matmul|linear|einsum")
# The convolution ops whose kernels run under the TF32 flag (torch.backends.cudnn.allow_tf32) in fp32.
CONV_FAMILY_OPS = CONV_OPS | {
    "aten::cudnn_convolution",
    "aten::cudnn_convolution_transpose",
    CONV_BACKWARD_OP,
    "aten::miopen_convolution",
}
# Where an op point's precision came from.
FROM_CONFIG = "run configuration"
FROM_OP_DTYPE = "op dtype"


# The counter columns a kernel's roofline point is computed from.
WORK_COLUMNS = (
    "tensor_flops",
    "fp64_flops",
    "fp32_flops",
    "fp16_flops",
    "dram_read_bytes",
    "dram_write_bytes",
    "duration_ns",
)


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
    """Per counter row (one replayed launch): FLOPs, DRAM and L2 bytes, ncu's duration, and the FLOPs of each
    pipe in `pipe:<pipe>` columns (hybrid.analysis.kernel_classes.flops_by_pipe), which sum over launches
    like the rest."""
    by_pipe = [flops_by_pipe(row) for row in counted.to_dict("records")]
    pipes = sorted({pipe for row in by_pipe for pipe in row})
    frame = pd.DataFrame(
        {
            "name": counted["name"].to_numpy(),
            "flops": [float(sum(row.values())) for row in by_pipe],
            "bytes": (counted["dram_read_bytes"].fillna(0) + counted["dram_write_bytes"].fillna(0)).to_numpy(
                float
            ),
            "l2_bytes": counted["l2_bytes"].to_numpy(float),
            "time_ns": counted["duration_ns"].to_numpy(float),
        },
        index=counted.index,
    )
    for pipe in pipes:
        frame[PIPE_PREFIX + pipe] = [row.get(pipe, 0.0) for row in by_pipe]
    return frame


def _with_mix(points: pd.DataFrame, peaks: Peaks) -> pd.DataFrame:
    """Each point's precision (its dominant pipe), FLOPs by precision and compute ceiling from its pipe
    columns."""
    pipes = [c for c in points.columns if c.startswith(PIPE_PREFIX)]
    mixes = (
        [
            {c[len(PIPE_PREFIX) :]: float(v) for c, v in zip(pipes, values, strict=False) if v > 0}
            for values in points[pipes].to_numpy(float)
        ]
        if pipes
        else [{} for _ in range(len(points))]
    )
    fallback = peaks.flops(DEFAULT_PRECISION)
    precision = [pipe_precision(dominant_pipe(mix, peaks)) if mix else DEFAULT_PRECISION for mix in mixes]
    ceiling = [compute_ceiling(mix, peaks) if mix else fallback for mix in mixes]
    by_precision = []
    for mix in mixes:
        merged: dict[str, float] = {}
        for pipe, flops in mix.items():
            merged[pipe_precision(pipe)] = merged.get(pipe_precision(pipe), 0.0) + flops
        by_precision.append(merged)
    return points.drop(columns=pipes).assign(
        precision=precision,
        ceiling=np.array([np.nan if c is None else c for c in ceiling], dtype=float),
        flops_by_precision=by_precision,
        precision_source=[MEASURED_NCU if mix else None for mix in mixes],
    )


def _points_from_counters(profile: Profile, counted: pd.DataFrame) -> pd.DataFrame:
    """One point per profiled kernel (counter row) that stands for launches in the steady steps: its
    counters per launch, and how many launches and how much timeline GPU time per step it covers."""
    matched, n = _matched_launches(profile, counted)
    if matched.empty:
        return pd.DataFrame()
    per_row = matched["ns"].groupby(matched["counter_row"]).agg(["size", "sum"])
    work = _counter_work(counted.loc[per_row.index])
    # The launch configuration tells apart the points of one kernel name (resnet50: 7 fprop points, 1 name).
    launch = counted.loc[per_row.index].reindex(columns=list(LAUNCH_CONFIG_COLUMNS)).fillna(0).to_numpy(int)
    return work.reset_index(drop=True).assign(
        source=MEASURED_NCU,
        per_step=per_row["size"].to_numpy(float) / n,
        step_time_ns=per_row["sum"].to_numpy(float) / n,
        grid=[list(map(int, row[:3])) if (row > 0).all() else None for row in launch],
        block=[list(map(int, row[3:])) if (row > 0).all() else None for row in launch],
    )


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
    per_launch = (
        work.loc[matched["counter_row"]]
        .set_index(matched.index)
        .assign(layer=matched["layer"].astype(str), ns=matched["ns"].astype(float))
    )
    by_layer = per_launch.groupby("layer", sort=False)
    sums = [
        c
        for c in per_launch.columns
        if c in ("flops", "bytes", "l2_bytes", "time_ns", "ns") or c.startswith(PIPE_PREFIX)
    ]
    totals = by_layer[sums].sum(min_count=1)
    steps = steady_steps(profile)
    in_layers = profile.kernels[
        profile.kernels["step"].isin(steps["step"]) & profile.kernels["layer"].notna()
    ]
    layer_ns = (in_layers["end_ns"] - in_layers["start_ns"]).groupby(in_layers["layer"].astype(str)).sum()
    # Already per step, like op points: every sum is over the steady steps' launches.
    points = (totals.drop(columns=["ns"]) / n).reset_index().rename(columns={"layer": "name"})
    return points.assign(
        source=MEASURED_NCU,
        per_step=1.0,
        step_time_ns=totals["ns"].to_numpy(float) / n,
        launches_per_step=by_layer.size().loc[totals.index].to_numpy(float) / n,
        covered_pct=100 * totals["ns"].to_numpy(float) / layer_ns.loc[totals.index].to_numpy(float),
    )


def _fp32_matmul_precision(profile: Profile, peaks: Peaks) -> dict[str, tuple[str, str]]:
    """What fp32 matmuls and convolutions ran as ({"matmul"|"conv": (precision, source)}): the run's
    configuration when the injector recorded it (TF32 flags), else the precision most of the run's
    fp32-or-TF32
    GEMM (or convolution) kernel time had, by hybrid.analysis.kernel_classes."""
    flags = (profile.extras.get("config") or {}).get("precision") or {}
    out: dict[str, tuple[str, str]] = {}
    for family, flag in (("matmul", "tf32_matmul"), ("conv", "tf32_conv")):
        if flag in flags:
            out[family] = ("tf32" if flags[flag] else "fp32", FROM_CONFIG)
    kernels = profile.kernels
    if len(out) == 2 or kernels.empty:
        return out
    classes = profile_kernel_classes(profile, kernels["name"], peaks)
    ns = (kernels["end_ns"] - kernels["start_ns"]).groupby(kernels["name"].astype(str)).sum()
    frame = classes.assign(ns=ns.reindex(classes.index).fillna(0).to_numpy())
    for family, kinds in (("matmul", ("gemm",)), ("conv", ("conv",))):
        if family in out:
            continue
        time = frame[frame["kind"].isin(kinds) & frame["precision"].isin(["fp32", "tf32"])]
        if time["ns"].sum() > 0:
            by_precision = time.groupby("precision")["ns"].sum()
            out[family] = (str(by_precision.idxmax()), FROM_NAME)
    return out


def _op_precision(name: str, dtypes, fp32_runs_as: dict[str, tuple[str, str]]) -> tuple[str, str]:
    precision = op_precision(dtypes) or DEFAULT_PRECISION
    family = "matmul" if name in MATMUL_OPS else "conv" if name in CONV_FAMILY_OPS else None
    if family is None:
        # Elementwise math in 16-bit types runs as fp32 instructions (hopper-metrics.md).
        return (DEFAULT_PRECISION if precision in ("bf16", "fp16") else precision), FROM_OP_DTYPE
    if precision == "fp32" and family in fp32_runs_as:
        return fp32_runs_as[family]
    return precision, FROM_OP_DTYPE


def _points_from_ops(profile: Profile, peaks: Peaks) -> pd.DataFrame:
    """One point per (op, shapes, dtypes) that ran kernels itself; FLOPs from torch, bytes modeled."""
    steps = steady_steps(profile)
    in_steps = profile.ops[profile.ops["step"].isin(steps["step"])].reset_index(drop=True)
    every_flops = ops_flops(in_steps)
    ran = (in_steps["device_ns"] > 0).to_numpy() & ~is_communication(in_steps["name"])
    ops, flops = in_steps[ran], every_flops[ran]
    if ops.empty:
        return pd.DataFrame()
    key = ops["name"] + "|" + ops["shapes"].astype(str) + "|" + ops["dtypes"].astype(str)
    grouped = ops.assign(key=key, flops=flops).groupby("key", sort=False)
    first = grouped.head(1).set_index("key")
    agg = grouped.agg(calls=("name", "size"), flops=("flops", "sum"), time_ns=("device_ns", "sum"))
    per_call = pd.Series(
        {
            k: op_bytes(name, shapes, dtypes)
            for k, name, shapes, dtypes in zip(
                first.index, first["name"], first["shapes"], first["dtypes"], strict=False
            )
        }
    )
    n = max(len(steps), 1)
    counted = (agg["flops"] > 0) | ~first.loc[agg.index, "name"].astype(str).str.contains(UNCOUNTED_MATMUL_OP)
    agg = agg[counted]
    fp32_runs_as = _fp32_matmul_precision(profile, peaks)
    labels = [
        _op_precision(name, dtypes, fp32_runs_as)
        for name, dtypes in zip(first.loc[agg.index, "name"], first.loc[agg.index, "dtypes"], strict=False)
    ]
    precision = [p for p, _ in labels]
    flops_per_step = agg["flops"].to_numpy(float) / n
    ceiling = [peaks.flops(p) or peaks.flops(DEFAULT_PRECISION) or np.nan for p in precision]
    return pd.DataFrame(
        {
            "name": first.loc[agg.index, "name"].to_numpy(),
            "flops": flops_per_step,
            "bytes": per_call.loc[agg.index].to_numpy(float) * agg["calls"].to_numpy() / n,
            "l2_bytes": np.nan,
            "time_ns": agg["time_ns"].to_numpy(float) / n,
            "precision": precision,
            "ceiling": np.array(ceiling, dtype=float),
            "flops_by_precision": [
                {p: f} if f > 0 else {} for p, f in zip(precision, flops_per_step, strict=False)
            ],
            "precision_source": [source for _, source in labels],
            "source": ESTIMATED,
            # Already per step: each point is its op's work and time per step.
            "per_step": 1.0,
            "step_time_ns": agg["time_ns"].to_numpy(float) / n,
        }
    )


def _place(points: pd.DataFrame, peaks: Peaks) -> pd.DataFrame:
    bw = peaks.dram
    peak = points["ceiling"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ai = np.where(points["bytes"] > 0, points["flops"] / points["bytes"], np.inf)
        attainable = np.minimum(peak, ai * bw)
        flops_per_s = points["flops"] / (points["time_ns"] / 1e9)
        bytes_per_s = points["bytes"] / (points["time_ns"] / 1e9)
        # A zero-FLOP point (a copy kernel) is judged by the bandwidth it reached.
        achieved_pct = np.where(points["flops"] > 0, 100 * flops_per_s / attainable, 100 * bytes_per_s / bw)
        l2_ai = points["flops"] / points["l2_bytes"]
    ridge = peak / bw
    return points.assign(
        ai=ai,
        l2_ai=l2_ai,
        ridge=ridge,
        flops_per_s=flops_per_s,
        bytes_per_s=bytes_per_s,
        achieved_pct=achieved_pct,
        bound=np.where(ai < ridge, "memory", "compute"),
    )


def counter_row_achieved_pct(counters: pd.DataFrame, peaks: Peaks) -> pd.Series:
    """Share of the attainable roofline (at its own FLOP mix's ceiling) each counter row reached, indexed
    like `counters`; NaN where ncu read no FLOPs or DRAM bytes for the row, or the bandwidth is unknown."""
    counted = counters[counters["tensor_flops"].notna() & counters["dram_read_bytes"].notna()]
    if counted.empty or peaks.dram is None:
        return pd.Series(np.nan, index=counters.index)
    return _place(_with_mix(_counter_work(counted), peaks), peaks)["achieved_pct"].reindex(counters.index)


def _split_above_ceiling(placed: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """The points at or below their compute ceiling, and a record of those above it (never shown as
    points)."""
    above = (placed["flops_per_s"] > placed["ceiling"] * (1 + CEILING_TOLERANCE)).to_numpy(bool)
    records = [
        {
            "name": r.name,
            "flops_per_s": float(r.flops_per_s),
            "ceiling_flops_per_s": float(r.ceiling),
            "precision": r.precision,
            "precision_source": r.precision_source if isinstance(r.precision_source, str) else None,
            "source": r.source,
        }
        for r in placed[above].itertuples(index=False)
    ]
    return placed[~above], records


def _time_pct(placed: pd.DataFrame) -> dict[str, float]:
    """Share of the placed kernel time per point precision."""
    time = placed["step_time_ns"].groupby(placed["precision"]).sum()
    return {
        str(p): round(float(100 * t / time.sum()), 2) for p, t in time.sort_values(ascending=False).items()
    }


def _step_flops(placed: pd.DataFrame) -> dict[str, float]:
    """FLOPs per step by precision: each point's FLOPs times the launches per step it stands for."""
    mix: dict[str, float] = {}
    for by_precision, per_step in zip(placed["flops_by_precision"], placed["per_step"], strict=True):
        for precision, flops in dict(by_precision).items():
            mix[precision] = mix.get(precision, 0.0) + float(flops) * float(per_step)
    return {p: f for p, f in sorted(mix.items(), key=lambda item: -item[1]) if f > 0}


def _step_ceiling(placed: pd.DataFrame, flops: dict[str, float], peaks: Peaks) -> tuple[float, str]:
    """(ceiling FLOP/s, how it was computed) of the step: its FLOPs over the time its kernels need one after
    another, each at its own ceiling (within a kernel the pipes run side by side,
    hybrid.analysis.kernel_classes.
    compute_ceiling; across kernels on a stream they queue), so a step of 94.5% TF32 FLOPs gets a
    ceiling near the TF32 peak however long its FP32 kernels ran."""
    work = (placed["flops"] * placed["per_step"]).to_numpy(float)
    ceiling = placed["ceiling"].to_numpy(float)
    usable = (work > 0) & np.isfinite(ceiling) & (ceiling > 0)
    if not usable.any():
        return peaks.flops(DEFAULT_PRECISION) or np.nan, "no FLOPs counted: the FP32 peak"
    total = sum(flops.values())
    shares = ", ".join(f"{p} {100 * f / total:.1f}%" for p, f in flops.items())
    left_out = int((work > 0).sum() - usable.sum())
    return float(work[usable].sum() / (work[usable] / ceiling[usable]).sum()), (
        f"the step's FLOPs ({shares}) over the time its kernels need one after another, each at its own "
        f"ceiling (its FLOP mix with every pipe at the {peaks.model or 'GPU'}'s peak)"
        + (f"; {left_out} point(s) without a known peak left out" if left_out else "")
    )


def _point(r, extra: dict) -> dict:
    return {
        "name": r.name,
        "ai": _finite(r.ai),
        "l2_ai": _finite(r.l2_ai),
        "flops_per_s": _finite(r.flops_per_s),
        "bytes_per_s": _finite(r.bytes_per_s),
        "time_ms": r.step_time_ns / NS_PER_MS,
        **extra,
        "bound": r.bound,
        "precision": r.precision,
        "precision_source": r.precision_source if isinstance(r.precision_source, str) else None,
        "flops_by_precision": dict(r.flops_by_precision),
        "ceiling_flops_per_s": _finite(r.ceiling),
        "achieved_pct_of_attainable": _finite(r.achieved_pct),
        "source": r.source,
    }


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
    placed, _ = _split_above_ceiling(_place(_with_mix(points, peaks), peaks))
    placed = placed.sort_values("step_time_ns", ascending=False).head(MAX_LAYER_POINTS)
    return [
        _point(r, {"kernels_per_step": r.launches_per_step, "covered_pct": float(r.covered_pct)})
        for r in placed.itertuples(index=False)
    ], None


def roofline(profile: Profile, peaks: Peaks) -> dict:
    """The `roofline` block of results.json."""
    empty = {
        "bound": None,
        "arithmetic_intensity": None,
        "ridge_point": None,
        "achieved_pct_of_attainable": None,
        "source": None,
        "kernels": [],
        "layers": [],
    }
    if peaks.dram is None:
        return {
            **empty,
            "reason": "DRAM bandwidth of this GPU is unknown",
            "layers_reason": "DRAM bandwidth of this GPU is unknown",
        }
    # A kernel is placed from counters only where ncu read all of its work: a GEMM with no FLOP metric
    # would sit at AI 0 as if it did no math, a kernel without its write bytes or its duration above
    # its real rate (an n/a read as 0).
    counted = profile.counters[profile.counters[list(WORK_COLUMNS)].notna().all(axis=1)]
    if counted.empty and not profile.counters.empty and profile.ops.empty:
        lacking = [c for c in WORK_COLUMNS if profile.counters[c].isna().any()]
        return {
            **empty,
            "reason": f"ncu measured no kernel's full work (no value for {', '.join(lacking)})",
            "layers_reason": "no kernel with all of its work measured by ncu",
        }
    layers, layers_reason = _layer_block(profile, counted, peaks)
    empty = {**empty, "layers": layers, **({"layers_reason": layers_reason} if layers_reason else {})}
    if not counted.empty:
        points = _points_from_counters(profile, counted)
        if points.empty:
            return {**empty, "reason": "no profiled kernel matches a launch in the measured steps"}
        points = _with_mix(points, peaks)
    elif not profile.ops.empty:
        points = _points_from_ops(profile, peaks)
    else:
        return {**empty, "reason": "no FLOP counts: run with ncu (--mode hybrid) or the torch pass"}
    points = points[(points["time_ns"] > 0) & (points["step_time_ns"] > 0)] if len(points) else points
    if points.empty:
        return {**empty, "reason": "no kernel time to place"}
    placed, above = _split_above_ceiling(_place(points, peaks))
    if placed.empty:
        return {**empty, "reason": "every point lies above its compute ceiling", "above_ceiling": above}
    time = placed["step_time_ns"]
    step_flops = _step_flops(placed)
    dominant = next(iter(step_flops), None) or time.groupby(placed["precision"]).sum().idxmax()
    ceiling, ceiling_method = _step_ceiling(placed, step_flops, peaks)
    ridge = ceiling / peaks.dram
    per_step = placed["per_step"]
    flops, nbytes = (placed["flops"] * per_step).sum(), (placed["bytes"] * per_step).sum()
    rate_ns = (placed["time_ns"] * per_step).sum()
    ai = flops / nbytes if nbytes else np.inf
    achieved = float((placed["achieved_pct"].clip(upper=100) * time).sum() / time.sum())
    l2_total = (placed["l2_bytes"] * per_step).sum(min_count=1)
    source = placed["source"].iloc[0]
    top = placed.sort_values("step_time_ns", ascending=False).head(MAX_POINTS)
    kernels = [
        _point(
            r,
            {
                "calls_per_step": r.per_step,
                **({"grid": r.grid, "block": r.block} if getattr(r, "grid", None) else {}),
            },
        )
        for r in top.itertuples(index=False)
    ]
    return {
        "bound": "memory" if ai < ridge else "compute",
        "arithmetic_intensity": _finite(ai),
        "l2_arithmetic_intensity": _finite(flops / l2_total) if pd.notna(l2_total) and l2_total else None,
        "ridge_point": _finite(ridge),
        "precision": dominant,
        # By FLOPs; the kernel time of each precision is precision_time_pct.
        "precision_mix_pct": {p: round(100 * f / sum(step_flops.values()), 2) for p, f in step_flops.items()},
        "precision_time_pct": _time_pct(placed),
        "ceiling_flops_per_s": _finite(ceiling),
        "ceiling_method": ceiling_method,
        "achieved_pct_of_attainable": achieved,
        "flops_per_s": _finite(flops / (rate_ns / 1e9)),
        "bytes_per_s": _finite(nbytes / (rate_ns / 1e9)),
        "time_ms": float(time.sum() / NS_PER_MS),
        "memory_bound_time_pct": float(100 * time[placed["bound"] == "memory"].sum() / time.sum()),
        "source": source,
        "kernels": kernels,
        "above_ceiling": above,
        "layers": layers,
        **({"layers_reason": layers_reason} if layers_reason else {}),
    }
