"""The normalized profile: every collector (torch trace, nsys export) is parsed once into these
frames, and everything downstream (metrics, roofline, rules, reports) reads only them.

Times are int64 nanoseconds on one clock per profile (the collector's own); only differences and
containment are meaningful. `step` is the measured step index (0-based) an event belongs to, or -1
when it falls outside every measured step. Device work belongs to the step whose range enclosed
its *launch* on the host, not to the range its execution happens to overlap.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# Column contracts. Loaders must produce exactly these columns (extra columns are allowed only where
# listed as optional); `empty_frame` builds an empty frame with the right dtypes.
STEP_COLUMNS = {"step": "int64", "name": "object", "start_ns": "int64", "end_ns": "int64"}

# A kernel launch's configuration, in the kernel and counter frames: a counter row belongs to the kernels
# launched with its name and these sizes, and the tables name a kernel's costliest configuration by them.
LAUNCH_CONFIG_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")

KERNEL_COLUMNS = {
    "name": "object",  # demangled kernel name
    "start_ns": "int64",
    "end_ns": "int64",
    "stream": "int64",
    "device": "int64",
    "correlation": "int64",
    "launch_ns": "int64",  # host start of the launch API call (-1 when unknown)
    **dict.fromkeys(LAUNCH_CONFIG_COLUMNS, "int64"),
    "registers": "int64",  # per thread, -1 when unknown
    "shared_bytes": "int64",  # static + dynamic per block, -1 when unknown
    "step": "int64",
    "layer": "object",  # innermost module NVTX range open at launch, None when none
}

# kind: HtoD, DtoH, DtoD, HtoH, PtoP. host_pinned: True pinned, False pageable, None unknown.
MEMCPY_COLUMNS = {
    "kind": "object",
    "bytes": "int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "stream": "int64",
    "host_pinned": "object",
    "step": "int64",
    "correlation": "int64",  # id shared with the API call that issued it (-1 when unknown)
}

MEMSET_COLUMNS = {
    "bytes": "int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "stream": "int64",
    "step": "int64",
    "correlation": "int64",
}

# Host time blocked waiting for the device. kind: stream, device, event, memcpy (a synchronous copy
# API such as cudaMemcpy DtoH), other. start/end are the *host* blocked interval.
SYNC_COLUMNS = {
    "kind": "object",
    "api": "object",
    "start_ns": "int64",
    "end_ns": "int64",
    "tid": "int64",  # the OS thread that blocked, as in `launches` and `samples`
    "step": "int64",
}

# Host-side launch API calls (cudaLaunchKernel, cuLaunchKernelEx, ...).
LAUNCH_COLUMNS = {
    "api": "object",
    "start_ns": "int64",
    "end_ns": "int64",
    "correlation": "int64",
    "tid": "int64",
    "step": "int64",
}

# Every host CUDA API call the export keeps (launches, copies, memsets, synchronizations, event
# records and stream waits), on every thread of the process, in start order: what the replay needs to
# rebuild the host's timeline (hybrid/replay). `global_tid` is the export's globalTid (process and
# thread; threads of one process share its upper bits); `correlation` joins a call to the kernel,
# copy or memset it issued. `sync_stream` is the stream a synchronization or stream-wait call named,
# as the export's synchronization records say (-1 when it has none, e.g. for a device sync).
API_CALL_COLUMNS = {
    "api": "object",
    "start_ns": "int64",
    "end_ns": "int64",
    "global_tid": "int64",
    "correlation": "int64",
    "sync_stream": "int64",
    "step": "int64",
}

# torch operators (torch pass only). shapes/dtypes are the recorded input dims and types (lists).
# flops is torch's estimate (NaN when the op has none). device_ns is the GPU time of kernels the op
# launched itself (self), cpu_self_ns its CPU time minus children. top_level marks ops with no
# parent op (used for CPU-residency attribution without double counting). device_idle_ns is the part
# of the op's host interval when the device ran nothing (no kernel, copy or memset), measured on the
# op's own pass's clock: the torch pass's ops are merged into profiles whose kernels come from nsys,
# on another clock, so this overlap can only be taken when the trace is loaded.
# User annotations (record_function ranges such as torch's DataLoader
# `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`) are kept as rows named
# ANNOTATION_PREFIX + their name. They are not operators: top_level False, cpu_self_ns and device_ns
# 0, no shapes or FLOPs, so operator totals are unchanged by them.
ANNOTATION_PREFIX = "annotation: "

# Collectives: NCCL kernels (ncclDevKernel_*, ncclKernel_*) and the torch ops or ranges around them
# (nccl:all_reduce, c10d::allreduce_, gloo:all_reduce, and torch.distributed's record_param_comms
# range). The job analysis measures them as communication; left among the compute kernels, an NCCL
# kernel (a few blocks, spinning while it waits for its peers) would read as a small-grid, zero-FLOP
# kernel far below the roofline, and ncu must never replay one (it waits for peers that are not
# replayed with it).
COMMUNICATION_PREFIXES = ("nccl", "c10d::", "gloo:", "record_param_comms")


def by_name(names: pd.Series, of_names: Callable[[pd.Series], np.ndarray]) -> np.ndarray:
    """`of_names` (a function of a Series of distinct names, as str) for each row of `names`, computed once
    per distinct name: a million launches of a few hundred kernels are a few hundred strings to test, and
    the 105,825 ops of launch_per_sample_loss's trace hold 76 names (pandas string methods run per row
    took 3.3 s of its analysis in three modes)."""
    codes, distinct = pd.factorize(names, use_na_sentinel=False)
    return np.asarray(of_names(pd.Series(np.asarray(distinct, dtype=object)).astype(str)))[codes]


def name_starts(names: pd.Series, prefix: str | tuple[str, ...]) -> np.ndarray:
    """Boolean mask of the rows of `names` that begin with `prefix` (one of them, for a tuple)."""
    return by_name(names, lambda distinct: distinct.str.startswith(prefix).to_numpy(bool))


def name_matches(names: pd.Series, pattern: str | re.Pattern[str]) -> np.ndarray:
    """Boolean mask of the rows of `names` that the regular expression `pattern` matches from their start
    (re.match)."""
    return by_name(names, lambda distinct: distinct.str.match(pattern).to_numpy(bool))


def is_communication(names: pd.Series) -> np.ndarray:
    """Boolean mask of the collective kernels or ops among `names` (kernel or op names)."""
    return by_name(
        names, lambda distinct: distinct.str.lower().str.startswith(COMMUNICATION_PREFIXES).to_numpy(bool)
    )


OP_COLUMNS = {
    "name": "object",
    "tid": "int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "cpu_self_ns": "int64",
    "device_ns": "int64",
    "shapes": "object",
    "dtypes": "object",
    "flops": "float64",
    "top_level": "bool",
    "step": "int64",
    "device_idle_ns": "int64",
}

# Module ranges (NVTX module ranges under nsys; record_function/module hierarchy in torch):
# one row per call, host interval; GPU time is derived by the kernels' `layer` column.
LAYER_COLUMNS = {"name": "object", "depth": "int64", "start_ns": "int64", "end_ns": "int64", "step": "int64"}

# Hardware counters from the ncu pass: one row per profiled kernel instance, matched back to all
# instances in `kernels` by (name, grid, block). NaN where a metric was not collected (an older
# ncu, a metric the chip lacks); rules that need it say so. Units: bytes, percent, operations.
COUNTER_COLUMNS = {
    "name": "object",
    **dict.fromkeys(LAUNCH_CONFIG_COLUMNS, "int64"),
    "duration_ns": "float64",
    "dram_read_bytes": "float64",
    "dram_write_bytes": "float64",
    "l2_bytes": "float64",
    "l2_hit_pct": "float64",
    "l1_hit_pct": "float64",
    "fp64_flops": "float64",  # SASS add + mul + 2*fma, all threads
    "fp32_flops": "float64",
    "fp16_flops": "float64",
    "tensor_flops": "float64",  # all precisions; per-precision detail in `tensor_flops_by_precision`
    "tensor_flops_by_precision": "object",  # {"bf16": ops, "fp16": ..., "tf32": ..., "fp8": ..., "fp64": ...}
    "tensor_pipe_pct": "float64",
    "sm_throughput_pct": "float64",
    "memory_throughput_pct": "float64",
    "achieved_occupancy_pct": "float64",
    "theoretical_occupancy_pct": "float64",
    "occupancy_limiter": "object",  # "registers" | "shared_memory" | "block_size" | "warps" | None
    "global_load_sectors_per_request": "float64",
    "sm_clock_hz": "float64",
}

# Which counter row (position in `counters`) each kernel takes and how strongly it matched
# (hybrid.load.ncu_match): one row per row of `kernels`, in the same order; -1 and MATCH_NONE where the
# kernel took none. Empty when no counters were attached.
KERNEL_COUNTER_COLUMNS = {"counter_row": "int64", "counter_match": "object"}
# Match levels, strongest first.
MATCH_LAUNCH = "launch"  # same signature, grid, block and position in the step
MATCH_CONFIG = "config"  # same signature, grid and block; another launch of it was profiled
# Same function base name, another instantiation or launch configuration: indicative only.
MATCH_NAME = "name"
MATCH_NONE = "none"
# The levels whose counters stand for the kernel itself: what every measured figure reads.
MEASURED_MATCHES = (MATCH_LAUNCH, MATCH_CONFIG)

# Python stacks sampled on the host (nsys --python-sampling), one row per sample, reduced to the
# sample's first frame in the user's own code, leaf first (nsight.python_frames): file, line and
# function, file None and line -1 when the stack has no such frame; and its library frame (the torch
# pass's stacks give none). A sample stands for
# [start_ns, end_ns), up to the thread's next sample. tid is the OS thread id, as in `launches`.
SAMPLE_COLUMNS = {
    "start_ns": "int64",
    "end_ns": "int64",
    "tid": "int64",
    "file": "object",
    "line": "int64",
    "function": "object",
    # The library frame the user's line made its call through (nsight.python_frames.first_library_frame):
    # torchvision's remove_small_boxes under `model(images)`; None / -1 where the user's line made it.
    "library_file": "object",
    "library_line": "int64",
    "library_function": "object",
}

# Where the user's code called each torch operator (torch pass with Python stacks): host time of the
# operator's calls per user line. `op` is the operator name as in `ops`.
OP_CALLSITE_COLUMNS = {"op": "object", "file": "object", "line": "int64", "function": "object", "ns": "int64"}

FRAME_COLUMNS = {
    "steps": STEP_COLUMNS,
    "kernels": KERNEL_COLUMNS,
    "memcpys": MEMCPY_COLUMNS,
    "memsets": MEMSET_COLUMNS,
    "syncs": SYNC_COLUMNS,
    "launches": LAUNCH_COLUMNS,
    "ops": OP_COLUMNS,
    "layers": LAYER_COLUMNS,
    "counters": COUNTER_COLUMNS,
    "kernel_counters": KERNEL_COUNTER_COLUMNS,
    "api_calls": API_CALL_COLUMNS,
    "samples": SAMPLE_COLUMNS,
    "op_callsites": OP_CALLSITE_COLUMNS,
}


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})


def conform(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Order and type a loader's frame to its contract; a missing column is a loader bug."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"frame lacks columns {missing}")
    out = frame[list(columns)].copy()
    for name, dtype in columns.items():
        if dtype != "object":
            out[name] = out[name].astype(dtype)
    return out.reset_index(drop=True)


@dataclass
class DeviceInfo:
    """What the collector saw of the GPU. Peaks come from hardware.py, not from here."""

    name: str | None = None  # e.g. "NVIDIA H200"; None when no GPU was used
    sm_count: int | None = None
    sm_clock_hz: float | None = None
    memory_bytes: int | None = None
    memory_bandwidth_bytes_per_s: float | None = None  # as the export reports it (nsys)
    l2_bytes: int | None = None
    compute_capability: str | None = None  # "9.0"
    max_warps_per_sm: int | None = None
    source: str = "none"  # which collector filled this in


@dataclass
class Profile:
    """Parsed once from the artifacts of one or more passes; `sources` says which collector each
    frame came from (a provenance value such as 'measured:nsys')."""

    steps: pd.DataFrame = field(default_factory=lambda: empty_frame(STEP_COLUMNS))
    kernels: pd.DataFrame = field(default_factory=lambda: empty_frame(KERNEL_COLUMNS))
    memcpys: pd.DataFrame = field(default_factory=lambda: empty_frame(MEMCPY_COLUMNS))
    memsets: pd.DataFrame = field(default_factory=lambda: empty_frame(MEMSET_COLUMNS))
    syncs: pd.DataFrame = field(default_factory=lambda: empty_frame(SYNC_COLUMNS))
    launches: pd.DataFrame = field(default_factory=lambda: empty_frame(LAUNCH_COLUMNS))
    ops: pd.DataFrame = field(default_factory=lambda: empty_frame(OP_COLUMNS))
    layers: pd.DataFrame = field(default_factory=lambda: empty_frame(LAYER_COLUMNS))
    counters: pd.DataFrame = field(default_factory=lambda: empty_frame(COUNTER_COLUMNS))
    kernel_counters: pd.DataFrame = field(default_factory=lambda: empty_frame(KERNEL_COUNTER_COLUMNS))
    api_calls: pd.DataFrame = field(default_factory=lambda: empty_frame(API_CALL_COLUMNS))
    samples: pd.DataFrame = field(default_factory=lambda: empty_frame(SAMPLE_COLUMNS))
    op_callsites: pd.DataFrame = field(default_factory=lambda: empty_frame(OP_CALLSITE_COLUMNS))
    device: DeviceInfo = field(default_factory=DeviceInfo)
    sources: dict[str, str] = field(default_factory=dict)
    # How steps were found: "nvtx:hybrid" (our injector), "nvtx:<NAME>" (--step-range), "pattern",
    # "periodicity", "steady-window", "whole-capture", "torch:annotation". A loader that inferred the
    # steps says what one step is, how sure it is (high | medium | low) and why.
    step_source: str = "none"
    step_unit: str | None = None
    step_confidence: str | None = None
    step_reason: str | None = None
    # The step windows (STEP_COLUMNS) of the pass whose clock `ops` is on, when that is not the clock of
    # the other frames (pipeline.merge: torch.profiler's ops beside nsys's timeline); None when all
    # frames share one clock. The ledger carries op intervals onto the analyzed timeline through it.
    ops_clock_steps: pd.DataFrame | None = None
    # Facts from the run that are not events: peak memory, graph breaks, ncu counters, etc.
    extras: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Frames derived from the ones above once, for every reader (hybrid.analysis.steps: step windows, steady
    # steps; hybrid.analysis.kernel_classes: kernel classes).
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    def validate(self) -> None:
        for name, columns in FRAME_COLUMNS.items():
            frame = getattr(self, name)
            missing = [c for c in columns if c not in frame.columns]
            if missing:
                raise ValueError(f"Profile.{name} lacks columns {missing}")

    @property
    def measured_steps(self) -> int:
        return len(self.steps)


def counters_per_kernel(profile: Profile) -> pd.DataFrame:
    """profile.kernels (index reset) with the counter columns of the counter row each kernel took (NaN
    where none) and its `counter_match`; every kernel MATCH_NONE when no counters are attached to them."""
    kernels = profile.kernels.reset_index(drop=True)
    matched = profile.kernel_counters
    if len(matched) != len(kernels) or not len(matched):
        return kernels.assign(counter_match=MATCH_NONE)
    values = profile.counters.drop(columns=["name", *LAUNCH_CONFIG_COLUMNS]).reset_index(drop=True)
    rows = matched["counter_row"].reset_index(drop=True)
    picked = values.reindex(rows.where(rows >= 0)).reset_index(drop=True)
    return pd.concat([kernels, picked], axis=1).assign(counter_match=matched["counter_match"].to_numpy())
