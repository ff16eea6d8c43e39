"""Each compute kernel's one shortfall, from what the timeline and the counters say about it.

Small pure tests, one per cause, applied in the ledger's precedence (causes.KERNEL_SHORTFALLS): the
first that holds names the kernel's time. A kernel ncu did not profile (or matched only by name) is
judged on its name and launch configuration alone. The thresholds are the rules' floors of today's
findings, kept here once so that the pools and the findings agree on what each cause is.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from hybrid.analysis.counters import UNCOALESCED_SECTORS_PER_REQUEST
from hybrid.analysis.grids import small_grid
from hybrid.analysis.kernel_classes import MATMUL_KINDS, per_kernel, profile_kernel_classes
from hybrid.analysis.roofline import counter_row_achieved_pct
from hybrid.hardware import Peaks
from hybrid.ledger.causes import KERNEL_SHORTFALLS
from hybrid.profile import MEASURED_MATCHES, Profile, by_name, counters_per_kernel, is_communication

# Below a quarter of the warp slots busy, latency hiding usually suffers (CUDA best-practices guide),
# except in wgmma GEMMs, which run at ~15% occupancy with a busy tensor pipe (hopper-metrics.md).
LOW_OCCUPANCY_PCT = 25.0
TENSOR_PIPE_BUSY_PCT = 50.0
# A 16-bit GEMM keeping its tensor pipe under 30% busy is not feeding the tiles.
LOW_TENSOR_PIPE_PCT = 30.0
# Below half of the practical ~80% of the roofline tuned kernels reach.
BELOW_ROOFLINE_PCT = 40.0
# CUTLASS names its kernels by the operand alignment they need, in elements ("..._align1"): tiles for
# 16-bit types want 8 (NVIDIA "Matrix Multiplication Background", Tensor Core Requirements), and a
# narrower kernel is what cuBLAS picks for a dimension off a multiple of 8.
NARROW_ALIGNMENT = re.compile(r"align[124](?!\d)")
SIXTEEN_BIT = ("fp16", "bf16")


def kernel_precisions(profile: Profile, kernels: pd.DataFrame, peaks: Peaks) -> pd.Series:
    """Precision of each GEMM, convolution or attention kernel (None for other kernels), from ncu's FLOP
    counters where it profiled the kernel, else its name (hybrid.analysis.kernel_classes)."""

    def of_names(names: pd.Series) -> np.ndarray:
        classes = profile_kernel_classes(profile, names, peaks)
        matmul = np.isin(per_kernel(names, classes, "kind"), MATMUL_KINDS)
        return np.where(matmul, per_kernel(names, classes, "precision"), None)

    return pd.Series(by_name(kernels["name"], of_names), index=kernels.index, dtype=object)


def fp32_gemm(precision: pd.Series) -> np.ndarray:
    return (precision == "fp32").to_numpy(bool)


def misaligned_gemm(names: pd.Series, precision: pd.Series) -> np.ndarray:
    narrow = by_name(names, lambda distinct: distinct.str.contains(NARROW_ALIGNMENT).to_numpy(bool))
    return precision.isin(SIXTEEN_BIT).to_numpy(bool) & narrow


def uncoalesced(sectors_per_request: np.ndarray) -> np.ndarray:
    return np.nan_to_num(sectors_per_request, nan=0.0) >= UNCOALESCED_SECTORS_PER_REQUEST


def low_occupancy(achieved_occupancy_pct: np.ndarray, tensor_pipe_pct: np.ndarray) -> np.ndarray:
    occupancy = np.nan_to_num(achieved_occupancy_pct, nan=np.inf)
    return (occupancy < LOW_OCCUPANCY_PCT) & (np.nan_to_num(tensor_pipe_pct, nan=0.0) < TENSOR_PIPE_BUSY_PCT)


def tensor_pipe_idle(precision: pd.Series, tensor_pipe_pct: np.ndarray) -> np.ndarray:
    pipe = np.nan_to_num(tensor_pipe_pct, nan=np.inf)
    return precision.isin(SIXTEEN_BIT).to_numpy(bool) & (pipe < LOW_TENSOR_PIPE_PCT)


def below_roofline(achieved_pct_of_attainable: np.ndarray) -> np.ndarray:
    return np.nan_to_num(achieved_pct_of_attainable, nan=np.inf) < BELOW_ROOFLINE_PCT


def kernel_causes(profile: Profile, peaks: Peaks) -> np.ndarray:
    """The busy cause of each row of profile.kernels (positional): communication for collectives, the
    first shortfall that holds for compute kernels, else kernel_no_shortfall (counters read) or
    kernel_unprofiled (none)."""
    attached = len(profile.kernel_counters) > 0
    # Without counters there is nothing to join (a copy of a million-row frame saved).
    kernels = counters_per_kernel(profile) if attached else profile.kernels.reset_index(drop=True)
    n = len(kernels)
    causes = np.full(n, "kernel_unprofiled", dtype=object)
    if n == 0:
        return causes
    measured = (
        kernels["counter_match"].isin(MEASURED_MATCHES).to_numpy(bool) if attached else np.zeros(n, bool)
    )

    def counter(col: str) -> np.ndarray:
        if col not in kernels:
            return np.full(n, np.nan)
        return np.where(measured, kernels[col].to_numpy(float), np.nan)

    rows = profile.kernel_counters["counter_row"].reset_index(drop=True)
    achieved = (
        counter_row_achieved_pct(profile.counters.reset_index(drop=True), peaks)
        .reindex(rows.where(rows >= 0))
        .to_numpy(float)
        if len(rows) == n
        else np.full(n, np.nan)
    )
    achieved = np.where(measured, achieved, np.nan)
    precision = kernel_precisions(profile, kernels, peaks)
    blocks = (kernels["grid_x"] * kernels["grid_y"] * kernels["grid_z"]).to_numpy(np.int64)
    sm_count = peaks.sm_count.value if peaks.sm_count else None
    tests = {
        "fp32_gemm": fp32_gemm(precision),
        "misaligned_gemm": misaligned_gemm(kernels["name"], precision),
        "small_grid": small_grid(blocks, sm_count),
        "uncoalesced": uncoalesced(counter("global_load_sectors_per_request")),
        "low_occupancy": low_occupancy(counter("achieved_occupancy_pct"), counter("tensor_pipe_pct")),
        "tensor_pipe_idle": tensor_pipe_idle(precision, counter("tensor_pipe_pct")),
        "below_roofline": below_roofline(achieved),
    }
    causes[measured] = "kernel_no_shortfall"
    # Applied last to first, so the earliest cause that holds is the one left.
    for cause in reversed(KERNEL_SHORTFALLS):
        causes[tests[cause]] = cause
    causes[by_name(kernels["name"], is_communication)] = "communication"
    return causes
