"""What torch.compile fuses, from the kernels alone: the fusion finding's figures and the replay of its fix
both read their groups here, so the finding and its replayed saving count the same kernels.

Inductor generates every memory-bound kernel between two library calls (cuBLAS, cuDNN convolutions,
attention) itself: elementwise ops, normalizations (batch norm is decomposed into a reduction and a
pointwise pass), softmax, pooling, reductions and layout copies, and fuses back-to-back ones into as few
kernels as their reductions allow. It also runs convolutions channels-last, so cuDNN's NCHW<->NHWC
transposes around them go. A group here is a run of such kernels on one stream inside one step.

A fused group keeps the time of its longest member: the fused kernels still make the passes over the data
that member makes (a batch norm's backward reads its input and gradient for the statistics, then again to
write the result), and every other member's passes go. On resnet50 training (H200, batch 32, default
precision) that saves 4.7 of the 10.4 ms a step in such runs; keeping their mean instead would claim
7.7 ms, more than a normalization's two passes allow.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from hybrid.analysis.kernel_classes import classify_kernels, per_kernel

# The kinds whose fused time verified runs measured: runs of elementwise kernels alone
# (roofline_unfused_gelu on the H200: 1.89 ms replayed, 2.01 realized), and resnet50's runs of batch norms,
# ReLUs, adds and layout copies (96% of their time; on two H100s the compile realized 12.8 and 12.4 ms
# against 10.3 and 11.4 replayed, both settled: benchmarks/results/s24_h100, s25_h100). Runs holding more
# than MEASURED_RUNS_PCT's complement in other kinds (softmax, reductions, pooling) rest on a premise the
# finding states (and stops at MODERATE).
MEASURED_KINDS = ("elementwise", "normalization", "copy")
MEASURED_RUNS_PCT = 95.0

FUSIBLE_KINDS = ("elementwise", "normalization", "softmax", "pooling", "reduction", "copy")
# Kernels of those kinds that belong to a library call, which Inductor leaves in the library: cuBLAS's
# split-K reduction and cuDNN's weight-gradient reduction finish a GEMM or convolution; cuDNN pads and
# flips filters for its own engines; CUB's device-wide select, scan, reduce and sort kernels are what
# nonzero, masked_select, unique, sort and top-k run, ops Inductor calls as they are (the torchvision
# detector's 5% of fusible-run time in them, beside its nonzero syncs).
_LIBRARY_PART = re.compile(
    r"splitKreduce|ReduceSplitK|reduce_wgrad|nhwcAddPadding|flip_filter|cub::", re.IGNORECASE
)


def fusible_mask(names: pd.Series, classes: pd.DataFrame | None = None) -> np.ndarray:
    """True for each kernel Inductor would generate itself, and so may fuse with its neighbours; `classes`:
    classify_kernels' frame for these names where the caller has it."""
    classes = classify_kernels(names) if classes is None else classes
    distinct = classes.index.to_series()
    fusible = classes["kind"].isin(FUSIBLE_KINDS) & ~distinct.str.contains(_LIBRARY_PART)
    return per_kernel(names, fusible.to_frame("fusible"), "fusible").astype(bool)


def fusion_runs(fusible: np.ndarray, stream: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs of two or more back-to-back fusible kernels of one stream and one step, the kernels given
    in (stream, start) order: the positions of their kernels, in order, and where each run starts among
    those positions (vectorized: resnet50 has 131 runs a step, and a loop over them, each masking its
    stream's events, was quadratic in the events)."""
    joined = np.zeros(len(fusible), bool)
    joined[1:] = fusible[1:] & fusible[:-1] & (stream[1:] == stream[:-1]) & (step[1:] == step[:-1])
    groups = np.cumsum(~joined)
    sizes = np.bincount(groups)
    positions = np.flatnonzero(fusible & (sizes[groups] >= 2))
    ids = groups[positions]
    first = np.ones(len(ids), bool)
    first[1:] = ids[1:] != ids[:-1]
    return positions, np.flatnonzero(first)


def fused_run_ns(durations: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each run's time once fused, from its kernels' `durations` (fusion_runs' order): its longest
    kernel's (see the module's docstring)."""
    return np.maximum.reduceat(durations, starts) if len(starts) else np.zeros(0, durations.dtype)


def unmeasured_fusion_premise(measured_pct: float | None, unmeasured_kinds: str | None) -> str | None:
    """The premise a saving replayed from these runs rests on, where no verified run measured it: None where
    the runs' time is in MEASURED_KINDS (fusible_chain_measured_pct and fusible_chain_unmeasured_kinds,
    from the step's metrics)."""
    if measured_pct is None or measured_pct >= MEASURED_RUNS_PCT:
        return None
    others = " and ".join(kind for kind in (unmeasured_kinds or "").split(", ") if kind) or "other"
    return (
        "each run of fusible kernels fuses down to its longest kernel's time, as Inductor's kernels would "
        f"({100 - measured_pct:.0f}% of the runs' time is in {others} kernels, whose "
        "fusion no verified run measured; `hybrid run --verify` times the compile)"
    )
