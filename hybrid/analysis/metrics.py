"""Per-step metrics read off a Profile, each tagged with where it came from.

Everything is aggregated per measured step and then averaged over the *steady* steps (hybrid.analysis.steps:
a step more than OUTLIER_STEP_FACTOR x the median is a one-off: lazy init, a recompile, a checkpoint; it
is named in `slowest_step` and counted in `steps_excluded`, not averaged in, unless such steps recur).
Work is vectorized (numpy interval unions, groupby); nothing loops per kernel, so 1M kernels stay fast.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from hybrid.analysis.counters import counter_metrics
from hybrid.analysis.fusion import MEASURED_KINDS, fused_run_ns, fusible_mask, fusion_runs
from hybrid.analysis.graph_breaks import graph_break_metrics
from hybrid.analysis.grids import small_grid
from hybrid.analysis.host_dispatch import dispatch_metrics, ops_text, optimizer_ranges
from hybrid.analysis.jitter import later_step_metrics
from hybrid.analysis.kernel_classes import (
    MATMUL_KINDS,
    kernel_label,
    per_kernel,
    profile_kernel_classes,
)
from hybrid.analysis.op_cost import (
    CONV_OPS,
    MATMUL_OPS,
    op_bytes,
    op_flops,
    op_gemm_dims,
    op_precision,
    ops_flops,
)
from hybrid.analysis.op_ranges import (
    CREATE_OPS,
    DATA_DEPENDENT_OPS,
    DATA_LOADER_NEXT,
    DDP_OP,
    MOVE_OPS,
    compiled_regions,
    cpu_heavy_by_name,
    data_loader_fetches,
    is_annotation,
    top_level_ops,
)
from hybrid.analysis.row_loop import row_loop
from hybrid.analysis.step_shapes import step_shape_metrics
from hybrid.analysis.steps import (
    frame_source,
    in_steps,
    per_step,
    steady_steps,
    step_windows,
)
from hybrid.analysis.sync_sites import sync_site_metrics
from hybrid.hardware import Peaks
from hybrid.numbers import NS_PER_MS, NS_PER_US
from hybrid.profile import Profile, by_name, is_communication
from hybrid.provenance import ESTIMATED, MEASURED_NCU, MEASURED_TORCH, Metric
from nsight.intervals import covered, interval_union

# "Tiny" kernels: below ~20 us a kernel costs about as much as its launch (eager PyTorch spends
# 5-20 us of host time per op), so the GPU cannot be kept busy by launches alone.
SMALL_KERNEL_NS = 20_000

# Mean copy size below which a copy rate measures latency (H200: 16 KiB pinned copies ran at 11 GB/s).
BANDWIDTH_MIN_COPY_BYTES = 1024
# Tensor-core tiles want every GEMM dim a multiple of 8 for fp16/bf16 (NVIDIA "Matrix
# Multiplication Background" user guide, "Tensor Core Requirements").
TENSOR_CORE_MULTIPLE = 8


def _top_names(ns: np.ndarray, names: np.ndarray, limit: int = 3) -> str:
    """The names holding the most time, largest first, each with its share of that time."""
    if not len(ns) or ns.sum() <= 0:
        return ""
    per_name = pd.Series(ns, dtype=float).groupby(names).sum().sort_values(ascending=False)
    total = per_name.sum()
    return "; ".join(f"{name} ({100 * value / total:.0f}%)" for name, value in per_name.head(limit).items())


# ----------------------------------------------------------------------------- sections
def _timing(profile: Profile, steps: pd.DataFrame, src: str) -> dict[str, Metric]:
    all_steps = step_windows(profile)
    dur_ms = steps["dur_ns"].to_numpy() / NS_PER_MS
    slow = all_steps.loc[all_steps["dur_ns"].idxmax()]
    mean = float(dur_ms.mean())
    std = float(dur_ms.std(ddof=0))
    return {
        "steps_measured": Metric(len(all_steps), "steps", src),
        "steps_excluded": Metric(int(len(all_steps) - len(steps)), "steps", src),
        "step_time_ms": Metric(mean, "ms", src),
        "step_time_median_ms": Metric(float(np.median(dur_ms)), "ms", src),
        "step_time_std_ms": Metric(std, "ms", src),
        "step_time_cv_pct": Metric(100 * std / mean if mean else 0.0, "%", src),
        "step_time_all_mean_ms": Metric(float(all_steps["dur_ns"].mean() / NS_PER_MS), "ms", src),
        "slowest_step": Metric(f"{slow['name']} ({slow['dur_ns'] / NS_PER_MS:.3g} ms)", "", src),
        "slowest_step_ms": Metric(float(slow["dur_ns"] / NS_PER_MS), "ms", src),
        **later_step_metrics(steps, src),
    }


def _device_work(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    frames = [f for f in (profile.kernels, profile.memcpys, profile.memsets) if not f.empty]
    if not frames:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    starts = np.concatenate([f["start_ns"].to_numpy(np.int64) for f in frames])
    ends = np.concatenate([f["end_ns"].to_numpy(np.int64) for f in frames])
    return interval_union(starts, ends)


def _utilization(profile: Profile, steps: pd.DataFrame, src: str) -> dict[str, Metric]:
    """Device busy and idle time per step; why it sat idle is the ledger's (hybrid.ledger) to say."""
    n = len(steps)
    us, ue = _device_work(profile)
    busy = covered(us, ue, steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy())
    step_ns = steps["dur_ns"].to_numpy()
    return {
        "gpu_busy_ms": Metric(per_step(busy.sum(), n) / NS_PER_MS, "ms", src),
        "gpu_idle_ms": Metric(per_step((step_ns - busy).sum(), n) / NS_PER_MS, "ms", src),
        "gpu_util_pct": Metric(100 * float(busy.sum() / step_ns.sum()) if step_ns.sum() else 0.0, "%", src),
    }


def _kernels(profile: Profile, steps: pd.DataFrame, peaks: Peaks, src: str) -> dict[str, Metric]:
    """Compute kernels only: collectives are the job analysis's communication metrics."""
    n = len(steps)
    k = in_steps(profile.kernels, steps)
    k = k[~is_communication(k["name"])]
    if k.empty:
        return {}
    dur = (k["end_ns"] - k["start_ns"]).to_numpy()
    step_s = steps["dur_ns"].sum() / 1e9
    out = {
        "kernels_per_step": Metric(per_step(len(k), n), "kernels", src),
        "kernel_time_ms": Metric(per_step(dur.sum(), n) / NS_PER_MS, "ms", src),
        "mean_kernel_us": Metric(float(dur.mean()) / NS_PER_US, "us", src),
        "small_kernel_share_pct": Metric(100 * float((dur < SMALL_KERNEL_NS).mean()), "%", src),
        "launch_rate_per_s": Metric(float(len(k) / step_s) if step_s else 0.0, "kernels/s", src),
        "distinct_kernels_per_step": Metric(
            float(k.groupby("step")["name"].nunique().mean()), "kernels", src
        ),
    }
    launches = in_steps(profile.launches, steps)
    if not launches.empty:
        launch_ns = (launches["end_ns"] - launches["start_ns"]).sum()
        out["launch_api_ms"] = Metric(
            per_step(launch_ns, n) / NS_PER_MS, "ms", frame_source(profile, "launches")
        )
        out["launch_api_to_kernel_ratio"] = Metric(
            float(launch_ns / dur.sum()) if dur.sum() else 0.0, "x", frame_source(profile, "launches")
        )
    sm = peaks.sm_count.value if peaks.sm_count else None
    if sm:
        blocks = (k["grid_x"] * k["grid_y"] * k["grid_z"]).to_numpy()
        small = small_grid(blocks, int(sm))
        out["small_grid_time_pct"] = Metric(100 * float(dur[small].sum() / dur.sum()), "%", src)
        out["small_grid_ms"] = Metric(per_step(dur[small].sum(), n) / NS_PER_MS, "ms", src)
        if small.any():
            # Time-weighted share of SMs the small grids could occupy at one block per SM.
            fill = float((blocks[small] / sm * dur[small]).sum() / dur[small].sum())
            out["small_grid_sm_fill_pct"] = Metric(100 * fill, "%", src)
        out["small_grid_kernels_per_step"] = Metric(per_step(small.sum(), n), "kernels", src)

    classes = profile_kernel_classes(profile, k["name"], peaks)
    kind = per_kernel(k["name"], classes, "kind")
    precision = per_kernel(k["name"], classes, "precision")
    measured = per_kernel(k["name"], classes, "precision_source") == MEASURED_NCU
    gemm = np.isin(kind, MATMUL_KINDS)
    out["gemm_time_ms"] = Metric(per_step(dur[gemm].sum(), n) / NS_PER_MS, "ms", src)
    if gemm.any():
        # Where each GEMM's precision came from: ncu's FLOP counters, else its name
        # (hybrid.analysis.kernel_classes).
        out["gemm_precision_measured_pct"] = Metric(
            100 * float(dur[gemm & measured].sum() / dur[gemm].sum()),
            "%",
            MEASURED_NCU if (gemm & measured).any() else src,
        )
    for p in ("fp32", "tf32", "fp16", "bf16", "fp8"):
        ns = dur[gemm & (precision == p)].sum()
        out[f"gemm_{p}_ms"] = Metric(per_step(ns, n) / NS_PER_MS, "ms", src)
        out[f"gemm_{p}_time_pct"] = Metric(100 * float(ns / dur[gemm].sum()) if gemm.any() else 0.0, "%", src)
    fp32 = gemm & (precision == "fp32")
    # cuBLAS (matmul, attention) and cuDNN (convolution) have separate TF32 switches.
    conv = kind == "conv"
    out["conv_kernel_ms"] = Metric(per_step(dur[conv].sum(), n) / NS_PER_MS, "ms", src)
    tf32 = gemm & (precision == "tf32")
    out["gemm_tf32_matmul_ms"] = Metric(per_step(dur[tf32 & ~conv].sum(), n) / NS_PER_MS, "ms", src)
    out["gemm_tf32_conv_ms"] = Metric(per_step(dur[tf32 & conv].sum(), n) / NS_PER_MS, "ms", src)
    out["gemm_fp32_matmul_ms"] = Metric(per_step(dur[fp32 & ~conv].sum(), n) / NS_PER_MS, "ms", src)
    out["gemm_fp32_conv_ms"] = Metric(per_step(dur[fp32 & conv].sum(), n) / NS_PER_MS, "ms", src)
    if fp32.any():
        out["gemm_fp32_measured_pct"] = Metric(
            100 * float(dur[fp32 & measured].sum() / dur[fp32].sum()),
            "%",
            MEASURED_NCU if (fp32 & measured).any() else src,
        )
        base = k["name"].map(kernel_label).astype(str).to_numpy()  # categorical: once per distinct name
        out["gemm_fp32_kernels"] = Metric(_top_names(dur[fp32], base[fp32]), "", src)
        layers = k["layer"].to_numpy(dtype=object)
        named = fp32 & pd.notna(layers)
        if named.any():
            out["gemm_fp32_layers"] = Metric(_top_names(dur[named], layers[named].astype(str)), "", src)
    out.update(_fusible_chains(k.assign(kind=kind, fusible=fusible_mask(k["name"], classes)), n, src))
    return out


def _fusible_chains(k: pd.DataFrame, n: int, src: str) -> dict[str, Metric]:
    """Back-to-back kernels torch.compile would generate and fuse (hybrid.analysis.fusion; `k` carries each
    kernel's `kind` and `fusible`): each group of two or more keeps its longest member's time once fused;
    the rest is the saving."""
    k = k.sort_values(["stream", "start_ns"])
    positions, starts = fusion_runs(k["fusible"].to_numpy(), k["stream"].to_numpy(), k["step"].to_numpy())
    run_ns = (k["end_ns"] - k["start_ns"]).to_numpy()[positions]
    saved = float(run_ns.sum() - fused_run_ns(run_ns, starts).sum())
    out = {
        "fusible_chains_per_step": Metric(per_step(len(starts), n), "chains", src),
        "fusible_chain_kernels_per_step": Metric(per_step(len(positions), n), "kernels", src),
        "fusible_chain_ms": Metric(per_step(run_ns.sum(), n) / NS_PER_MS, "ms", src),
        "fusible_saving_ms": Metric(per_step(saved, n) / NS_PER_MS, "ms", ESTIMATED),
    }
    if len(positions):
        # What the runs hold, e.g. "normalization 50%, elementwise 28%, copy 18%" (resnet50 training).
        by_kind = pd.Series(run_ns, dtype=float).groupby(k["kind"].to_numpy()[positions]).sum()
        shares = by_kind.sort_values(ascending=False) / run_ns.sum()
        listed = [f"{kind} {100 * share:.0f}%" for kind, share in shares.items() if share >= 0.01]
        out["fusible_chain_kinds"] = Metric(", ".join(listed), "", src)
        measured = float(shares[shares.index.isin(MEASURED_KINDS)].sum())
        out["fusible_chain_measured_pct"] = Metric(100 * measured, "%", src)
        # The kinds whose fusion no verified run measured, largest first (resnet50 training: pooling).
        unmeasured = [kind for kind, share in shares.items() if share >= 0.01 and kind not in MEASURED_KINDS]
        out["fusible_chain_unmeasured_kinds"] = Metric(", ".join(unmeasured), "", src)
    return out


def _copies(profile: Profile, steps: pd.DataFrame, peaks: Peaks, src: str) -> dict[str, Metric]:
    n = len(steps)
    m = in_steps(profile.memcpys, steps)
    if m.empty:
        return {}
    m = m.assign(ns=m["end_ns"] - m["start_ns"])
    out: dict[str, Metric] = {}
    for kind in ("HtoD", "DtoH"):
        part = m[m["kind"] == kind]
        tag = kind.lower()
        out[f"{tag}_count"] = Metric(per_step(len(part), n), "copies", src)
        out[f"{tag}_bytes"] = Metric(per_step(part["bytes"].sum(), n), "B", src)
        out[f"{tag}_ms"] = Metric(per_step(part["ns"].sum(), n) / NS_PER_MS, "ms", src)
        # A copy of a few bytes (a loss read back with .item()) takes its launch latency, whatever its size:
        # bytes over that time are no bandwidth (4 B in 1.7 us read "2.4 MB/s" on the H200).
        if part["ns"].sum() > 0 and part["bytes"].mean() >= BANDWIDTH_MIN_COPY_BYTES:
            bw = float(part["bytes"].sum() / (part["ns"].sum() / 1e9))
            out[f"{tag}_bytes_per_s"] = Metric(bw, "B/s", src)
            if peaks.host_link_bytes_per_s:
                out[f"{tag}_link_pct"] = Metric(100 * bw / peaks.host_link_bytes_per_s.value, "%", src)
    host = m[m["kind"].isin(["HtoD", "DtoH"])]
    pageable = host[host["host_pinned"].eq(False)]
    if host["bytes"].sum() > 0:
        out["pageable_copy_share_pct"] = Metric(
            100 * float(pageable["bytes"].sum() / host["bytes"].sum()), "%", src
        )
    out["pageable_copies_per_step"] = Metric(per_step(len(pageable), n), "copies", src)
    out["pageable_copy_ms"] = Metric(per_step(pageable["ns"].sum(), n) / NS_PER_MS, "ms", src)
    if pageable["ns"].sum() > 0:
        out["pageable_bytes_per_s"] = Metric(
            float(pageable["bytes"].sum() / (pageable["ns"].sum() / 1e9)), "B/s", src
        )
    ks = profile.kernels
    kus, kue = interval_union(ks["start_ns"].to_numpy(np.int64), ks["end_ns"].to_numpy(np.int64))
    overlap = covered(kus, kue, host["start_ns"].to_numpy(), host["end_ns"].to_numpy())
    total = host["ns"].sum()
    out["copy_compute_overlap_pct"] = Metric(100 * float(overlap.sum() / total) if total else 0.0, "%", src)
    out["exposed_copy_ms"] = Metric(per_step(total - overlap.sum(), n) / NS_PER_MS, "ms", src)
    pageable_overlap = covered(kus, kue, pageable["start_ns"].to_numpy(), pageable["end_ns"].to_numpy())
    out["exposed_pageable_copy_ms"] = Metric(
        per_step(pageable["ns"].sum() - pageable_overlap.sum(), n) / NS_PER_MS, "ms", src
    )
    return out


def _syncs(profile: Profile, steps: pd.DataFrame) -> dict[str, Metric]:
    n = len(steps)
    s = in_steps(profile.syncs, steps)
    src = frame_source(profile, "syncs")
    out = {
        "sync_count": Metric(per_step(len(s), n), "syncs", src),
        "sync_blocked_ms": Metric(per_step((s["end_ns"] - s["start_ns"]).sum(), n) / NS_PER_MS, "ms", src),
    }
    if "kind" in s:
        # cudaDeviceSynchronize: what torch.cuda.synchronize() calls; no tensor operation syncs the device.
        out["device_sync_count"] = Metric(per_step(int(s["kind"].eq("device").sum()), n), "syncs", src)
    # A step that syncs and runs ops of data-dependent shape: no CUDA graph is captured across them
    # (torchvision's Faster R-CNN eval: nonzero and masked_select, 22 syncs a step).
    ran = set(in_steps(profile.ops, steps)["name"].unique()) if len(s) else set()
    shaped = [name for name in DATA_DEPENDENT_OPS if name in ran]
    if shaped:
        out["data_dependent_sync_ops"] = Metric(", ".join(shaped), "", frame_source(profile, "ops"))
    return out


def _data_loader(profile: Profile, steps: pd.DataFrame) -> dict[str, Metric]:
    """Host time spent fetching batches from a torch DataLoader, and the part of it when the device
    had nothing to run (measured on the torch pass's clock, where the annotations were recorded)."""
    fetches = data_loader_fetches(in_steps(profile.ops, steps))
    if fetches.empty:
        return {}
    iterator = fetches["name"].astype(str).str.extract(DATA_LOADER_NEXT, expand=False)
    n = len(steps)
    src = frame_source(profile, "ops")
    return {
        "data_loader_ms": Metric(
            per_step((fetches["end_ns"] - fetches["start_ns"]).sum(), n) / NS_PER_MS, "ms", src
        ),
        "data_loader_idle_ms": Metric(per_step(fetches["device_idle_ns"].sum(), n) / NS_PER_MS, "ms", src),
        "data_loader_iterator": Metric(str(iterator.mode().iloc[0]), "", src),
        **_fetch_one_thread(profile, steps, fetches, n),
    }


# at::internal::GRAIN_SIZE: a TensorIterator op splits its elements into tasks of at least this many.
INTRA_OP_GRAIN = 32768
# Ops that split no elements over the intra-op threads: views and metadata (their input is the whole
# tensor they index: aten::select of one sample from a dataset tensor), random scalars, and pinning, which
# moves to the DataLoader's pin-memory thread of the training process when workers fetch.
ONE_THREAD_OPS = frozenset(
    (
        "aten::select",
        "aten::slice",
        "aten::as_strided",
        "aten::view",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::narrow",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::expand",
        "aten::permute",
        "aten::transpose",
        "aten::t",
        "aten::unbind",
        "aten::split",
        "aten::chunk",
        "aten::alias",
        "aten::detach",
        "aten::detach_",
        "aten::lift_fresh",
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::randint",
        "aten::randperm",
        "aten::random_",
        "aten::numpy_T",
        "aten::pin_memory",
        "aten::_pin_memory",
    )
)


def _fetch_one_thread(
    profile: Profile, steps: pd.DataFrame, fetches: pd.DataFrame, n: int
) -> dict[str, Metric]:
    """The fetch as a DataLoader worker runs it (torch.set_num_threads(1) in every worker): each top-level op
    inside __next__ takes its measured time times the intra-op tasks it could split into (its largest
    input's elements over the grain, at most the cores), the Python between ops as measured."""
    cpus = profile.extras.get("host_cpus")
    if type(cpus) is not int or cpus <= 0:
        return {}
    ops = in_steps(profile.ops, steps)
    ops = ops[ops["top_level"].astype(bool) & ~is_annotation(ops["name"])]
    starts = ops["start_ns"].to_numpy(np.int64)
    ends = ops["end_ns"].to_numpy(np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    names = ops["name"].astype(str).to_numpy()[order]
    shapes = ops["shapes"].to_numpy()[order]
    tids = ops["tid"].to_numpy()[order]

    def tasks(i: int) -> int:
        if names[i] in ONE_THREAD_OPS:
            return 1
        dims = shapes[i] if isinstance(shapes[i], list | tuple) else []
        numel = max((int(np.prod(d)) for d in dims if isinstance(d, list | tuple) and len(d)), default=0)
        return max(1, min(cpus, -(-numel // INTRA_OP_GRAIN)))

    total = 0.0
    for _, fetch in fetches.iterrows():
        lo = np.searchsorted(starts, fetch["start_ns"], "left")
        hi = np.searchsorted(starts, fetch["end_ns"], "left")
        wall = float(fetch["end_ns"] - fetch["start_ns"])
        extra = 0.0
        for i in range(lo, hi):
            if ends[i] <= fetch["end_ns"] and tids[i] == fetch["tid"]:
                extra += float(ends[i] - starts[i]) * (tasks(i) - 1)
        total += wall + extra
    return {"data_loader_one_thread_ms": Metric(per_step(total, n) / NS_PER_MS, "ms", ESTIMATED)}


def _compiled_regions(profile: Profile, steps: pd.DataFrame) -> dict[str, Metric]:
    """Host time inside torch.compile'd regions and the device idle time within them, on the torch
    pass's clock (where the ranges were recorded). With graph breaks, that idle time is the compiled
    code's own overhead: guard checks and graph switches at each break, and the eager code and syncs
    between the pieces."""
    outer = compiled_regions(in_steps(profile.ops, steps))
    if outer.empty:
        return {}
    n = len(steps)
    src = frame_source(profile, "ops")
    return {
        "compiled_region_ms": Metric(
            per_step((outer["end_ns"] - outer["start_ns"]).sum(), n) / NS_PER_MS, "ms", src
        ),
        "compiled_region_idle_ms": Metric(per_step(outer["device_idle_ns"].sum(), n) / NS_PER_MS, "ms", src),
    }


def _ops(profile: Profile, steps: pd.DataFrame) -> dict[str, Metric]:
    n = len(steps)
    with_annotations = in_steps(profile.ops, steps)
    ops = with_annotations[~is_annotation(with_annotations["name"])]
    if ops.empty:
        return {}
    src = frame_source(profile, "ops")
    out: dict[str, Metric] = {}
    top = top_level_ops(ops)
    heavy = cpu_heavy_by_name(top)
    out["cpu_heavy_ops"] = Metric(len(heavy), "ops", src)
    out["cpu_heavy_ops_ms"] = Metric(per_step(heavy["cpu_ns"].sum(), n) / NS_PER_MS, "ms", src)
    # Every name, most CPU time first, so the list matches the count beside it; reports shorten it.
    out["cpu_heavy_op_names"] = Metric(", ".join(heavy.index), "", src)
    if len(heavy):
        out["cpu_heavy_op_calls"] = Metric(ops_text(top[top["name"].isin(heavy.index)], n), "", src)

    out.update(step_shape_metrics(top, src))
    loop = row_loop(top, n)
    if loop is not None:
        out["row_loop_rows"] = Metric(loop.rows, "rows", src)
        out["row_loop_indexing"] = Metric(f"{loop.indexing_op} of a {loop.tensor_text()} tensor", "", src)
        out["row_loop_ops"] = Metric(loop.ops_text(), "", src)
        out["row_loop_host_ms"] = Metric(loop.host_ms, "ms", src)

    no_gpu = top[top["device_total_ns"] == 0]
    out["cpu_only_ops_ms"] = Metric(per_step(no_gpu["cpu_ns"].sum(), n) / NS_PER_MS, "ms", src)
    # DistributedDataParallel's own ranges and reducer ops: the model is DDP-wrapped (hybrid.rules.advice).
    out["ddp_ops_per_step"] = Metric(
        per_step(by_name(ops["name"], lambda names: names.str.contains(DDP_OP).to_numpy(bool)).sum(), n),
        "ops",
        src,
    )
    longest = no_gpu.groupby("name")["cpu_ns"].sum().sort_values(ascending=False)
    out["cpu_only_op_names"] = Metric(", ".join(longest.index[:3]), "", src)
    out.update(dispatch_metrics(with_annotations, no_gpu, n, src))

    ordered = top.sort_values(["tid", "start_ns"])
    nxt = ordered["name"].shift(-1)
    same_tid = ordered["tid"].eq(ordered["tid"].shift(-1))
    # torch.optim's own step count: Adam and AdamW (not fused, not capturable) run aten::empty then aten::to
    # on the host inside Optimizer.step every step (9 of the committed captures, one a step), a tensor that
    # stays on the CPU; read as "created on the CPU then moved" it took the batch's copy time.
    in_optimizer = optimizer_ranges(with_annotations, ordered) != ""
    moved = (
        ordered["name"].isin(CREATE_OPS)
        & ordered["device_total_ns"].eq(0)
        & nxt.isin(MOVE_OPS)
        & same_tid
        & ~in_optimizer
    )
    out["created_on_cpu_then_moved"] = Metric(per_step(moved.sum(), n), "tensors", src)
    out["created_on_cpu_op_names"] = Metric(", ".join(sorted(set(ordered.loc[moved, "name"]))), "", src)

    # FLOPs (op_cost.ops_flops: torch's formula per op, backward convolutions from their shapes) and bytes
    # (shapes x dtype sizes) are models, not counters.
    flops = pd.Series(ops_flops(ops), index=ops.index, dtype=float)
    out["est_flops_per_step"] = Metric(per_step(flops.sum(), n), "FLOP", ESTIMATED)
    leaf = ops[ops["device_ns"] > 0]
    keys = leaf["name"].astype(str) + "|" + leaf["shapes"].astype(str) + "|" + leaf["dtypes"].astype(str)
    first = leaf.groupby(keys, sort=False).head(1)
    per_key = {
        key: op_bytes(r.name, r.shapes, r.dtypes)
        for key, r in zip(keys.loc[first.index], first.itertuples(index=False), strict=False)
    }
    out["est_bytes_per_step"] = Metric(per_step(keys.map(per_key).sum(), n), "B", ESTIMATED)

    with_flops = ops[flops > 0]
    if not with_flops.empty:
        precision = with_flops["dtypes"].map(op_precision)
        by_p = flops[flops > 0].groupby(precision).sum()
        for p in ("fp32", "fp16", "bf16", "fp8", "fp64"):
            out[f"matmul_{p}_flops_pct"] = Metric(100 * float(by_p.get(p, 0) / by_p.sum()), "%", ESTIMATED)
    out.update(_misaligned(ops, n, src))
    return out


def _misaligned(ops: pd.DataFrame, n: int, src: str) -> dict[str, Metric]:
    gemm = ops[ops["name"].isin(MATMUL_OPS | CONV_OPS)]
    precision = gemm["dtypes"].map(op_precision)
    gemm = gemm[precision.isin(["fp16", "bf16"])]
    if gemm.empty:
        return {"misaligned_gemms_per_step": Metric(0.0, "calls", src)}
    keys = gemm["name"] + "|" + gemm["shapes"].astype(str)
    first = gemm.groupby(keys, sort=False).head(1)
    bad = {
        key: any(d % TENSOR_CORE_MULTIPLE for d in op_gemm_dims(name, shapes))
        for key, name, shapes in zip(keys.loc[first.index], first["name"], first["shapes"], strict=False)
    }
    flags = keys.map(bad)
    examples = [
        f"{name} {shapes}"
        for key, name, shapes in zip(keys.loc[first.index], first["name"], first["shapes"], strict=False)
        if bad[key]
    ][:3]
    bad_calls = gemm[flags.to_numpy(bool)]
    # FLOPs and modeled bytes of those calls place them on the roofline (tensor_core rule).
    flops = sum(
        op_flops(name, shapes, f)
        for name, shapes, f in zip(bad_calls["name"], bad_calls["shapes"], bad_calls["flops"], strict=False)
    )
    nbytes = sum(
        op_bytes(name, shapes, dtypes)
        for name, shapes, dtypes in zip(
            bad_calls["name"], bad_calls["shapes"], bad_calls["dtypes"], strict=False
        )
    )
    return {
        "misaligned_gemms_per_step": Metric(per_step(flags.sum(), n), "calls", src),
        "misaligned_gemm_device_ms": Metric(
            per_step(gemm.loc[flags, "device_ns"].sum(), n) / NS_PER_MS, "ms", src
        ),
        "misaligned_gemm_shapes": Metric("; ".join(examples), "", src),
        "misaligned_gemm_flops": Metric(per_step(flops, n), "FLOP", ESTIMATED),
        "misaligned_gemm_bytes": Metric(per_step(nbytes, n), "B", ESTIMATED),
        "misaligned_gemm_precision": Metric(
            str(precision.loc[bad_calls.index].mode().iloc[0]) if flags.any() else "", "", src
        ),
    }


# extras key: the mean steady step of the pass whose clock the ops frame is on, when the analyzed
# timeline is another pass's (pipeline.merge).
OPS_CLOCK_STEP_NS = "ops_clock_step_ns"


def _extras(profile: Profile) -> dict[str, Metric]:
    extras = profile.extras
    src = MEASURED_TORCH  # the injector reads these from torch in the profiled process
    out: dict[str, Metric] = {}
    peak = extras.get("peak_memory_bytes")
    capacity = extras.get("memory_capacity_bytes") or profile.device.memory_bytes
    if peak:
        out["peak_memory_bytes"] = Metric(int(peak), "B", src)
        if capacity:
            out["peak_memory_pct"] = Metric(100 * float(peak) / float(capacity), "%", src)
    out.update(graph_break_metrics(extras.get("graph_breaks")))
    if extras.get(OPS_CLOCK_STEP_NS):
        out["torch_pass_step_time_ms"] = Metric(
            float(extras[OPS_CLOCK_STEP_NS]) / NS_PER_MS, "ms", MEASURED_TORCH
        )
    if extras.get("batch_size") is not None:
        out["batch_size"] = Metric(int(extras["batch_size"]), "samples", src)
    if type(extras.get("host_cpus")) is int and extras["host_cpus"] > 0:
        out["host_cpus"] = Metric(extras["host_cpus"], "cores", src)
    window, window_cpu = extras.get("window_ns"), extras.get("window_cpu_ns")
    if type(window) is int and type(window_cpu) is int and window > 0 and window_cpu >= 0:
        # The profiled process's CPU time (all its threads) over its measured window's wall time.
        out["host_cores_busy"] = Metric(window_cpu / window, "cores", src)
    if extras.get("uses_compile") is not None:
        out["uses_compile"] = Metric(int(bool(extras["uses_compile"])), "bool", src)
    out.update(_gc(extras, src))
    out.update(_loader_cpu(extras, src))
    return out


def _loader_cpu(extras: dict, src: str) -> dict[str, Metric]:
    """The share of the DataLoader fetches' wall time their thread ran on a CPU or waited in the run queue
    for one (hybrid.inject.loader_watch): low where a fetch waits for storage or the network, high where it
    computes, on a loaded machine too."""
    record = extras.get("data_loader")
    if not isinstance(record, dict):
        return {}
    wall, cpu, runnable = record.get("wall_ms"), record.get("cpu_ms"), record.get("runnable_ms")
    if not isinstance(wall, int | float) or not isinstance(cpu, int | float) or wall <= 0 or cpu < 0:
        return {}
    demand = float(cpu) + (float(runnable) if isinstance(runnable, int | float) and runnable > 0 else 0.0)
    return {"data_loader_cpu_pct": Metric(min(100.0, 100.0 * demand / float(wall)), "%", src)}


def _gc(extras: dict, src: str) -> dict[str, Metric]:
    """Python's garbage collections in the injector's measured window (hybrid.inject.gc_watch)."""
    gc, steps = extras.get("gc"), extras.get("measured_steps")
    if not isinstance(gc, dict) or not isinstance(steps, int) or steps < 1:
        return {}
    counts, ms, longest = gc.get("collections"), gc.get("ms"), gc.get("longest_ms")
    if not (isinstance(counts, list) and len(counts) == 3 and all(isinstance(c, int) for c in counts)):
        return {}
    if not isinstance(ms, int | float) or not isinstance(longest, int | float):
        return {}
    out = {
        "gc_collections_per_step": Metric(sum(counts) / steps, "collections", src),
        "gc_full_collections": Metric(counts[2], "collections", src),
        "gc_ms_per_step": Metric(float(ms) / steps, "ms", src),
        "gc_longest_ms": Metric(float(longest), "ms", src),
    }
    sites = explicit_collect_sites(extras)
    if sites:
        site = sites[0]
        out["gc_collect_site"] = Metric(f"{os.path.basename(site['file'])}:{site['line']}", "", src)
        out["gc_collect_site_ms_per_step"] = Metric(float(site["ms"]) / steps, "ms", src)
    return out


def explicit_collect_sites(extras: dict) -> list[dict]:
    """The full collections the script's own gc.collect() calls ran (hybrid.inject.gc_watch's `full_sites`
    where `explicit`), most time first; the entries of a damaged record are left out."""
    gc = extras.get("gc")
    sites = gc.get("full_sites") if isinstance(gc, dict) else None
    return [
        s
        for s in (sites if isinstance(sites, list) else [])
        if isinstance(s, dict)
        and s.get("explicit") is True
        and isinstance(s.get("file"), str)
        and isinstance(s.get("line"), int)
        and isinstance(s.get("ms"), int | float)
    ]


def compute_metrics(profile: Profile, peaks: Peaks) -> dict[str, Metric]:
    """All metrics of the profile, per measured step; empty when there is no measured step."""
    steps = steady_steps(profile)
    if steps.empty:
        return {}
    step_src = frame_source(profile, "steps")
    out = _timing(profile, steps, step_src)
    if not profile.kernels.empty or not profile.memcpys.empty:
        out.update(_utilization(profile, steps, frame_source(profile, "kernels")))
        out.update(_kernels(profile, steps, peaks, frame_source(profile, "kernels")))
        out.update(_copies(profile, steps, peaks, frame_source(profile, "memcpys")))
    out.update(_syncs(profile, steps))
    out.update(sync_site_metrics(profile, steps))
    out.update(_ops(profile, steps))
    out.update(_compiled_regions(profile, steps))
    out.update(_data_loader(profile, steps))
    out.update(_extras(profile))
    out.update(counter_metrics(profile, steps, peaks))
    return out
