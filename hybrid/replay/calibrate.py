"""Which GEMM/convolution shapes of a run the calibration pass times, and what its timings say: the shapes
come from the torch pass's operators (shapes, dtypes, device time), the timings from
hybrid.collect.microbench on the run's GPU, and calibration.json is what the replay reads
(hybrid.replay.choose). Pure: no torch, no trace loading."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from hybrid.analysis.op_cost import OP_DTYPE_PRECISION
from hybrid.analysis.op_ranges import op_subtree_device_ns
from hybrid.numbers import NS_PER_US
from hybrid.numbers import significant as fmt

CALIBRATION_FILE = "calibration.json"


def cache_dir() -> Path:
    """The folder of hybrid's per-GPU caches (the calibration's timings, the realized savings of verified
    fixes): HYBRID_CACHE_DIR, else ~/.cache/hybrid."""
    return Path(os.environ.get("HYBRID_CACHE_DIR") or Path.home() / ".cache" / "hybrid")


# Tensor-core tiles want M, N, K (and channels) in multiples of this for 16-bit types.
ALIGN = 8
# Precisions a fix can propose for a matmul of a given dtype: TF32 (tensor.fp32_gemm's first advice, and
# the speedup its replay uses), bf16 autocast (its second), dims padded to ALIGN (tensor.misaligned_dims).
PROPOSALS = {"fp32": ("tf32", "bf16"), "fp16": ("fp16_aligned",), "bf16": ("bf16_aligned",)}
# The recorded dtypes whose matmuls a fix proposes for, as op_cost names their precision (fp64 and fp8 have
# no proposal, so no shape of theirs is timed).
DTYPES = {dtype: precision for dtype, precision in OP_DTYPE_PRECISION.items() if precision in PROPOSALS}
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution")
# Said where a convolution's stride, padding, dilation and groups were not recorded (a trace without
# "Concrete Inputs"): the timed convolution keeps the output size.
CONV_ASSUMED = "stride 1, padding k//2, no dilation, 1 group (not recorded in the trace)"


@dataclass(frozen=True)
class Shape:
    """A GEMM (m, n, k[, batch]) or a convolution (input NCHW, weight OIhw) in a dtype; a convolution's
    `conv` is (stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups) where the trace recorded
    them, else () and CONV_ASSUMED is timed. A GEMM's `layout` says which operand was column-major in the
    run ("nt": b transposed, as nn.Linear's weight; "tn", "tt"), "" for both row-major or unrecorded:
    cuBLAS runs other kernels for them (tc_fp16_unaligned's transposed weight gradient: 5.5 ms a call in
    the run, 3.4 ms timed contiguous)."""

    op: str  # "mm", "bmm" or "conv"
    dims: tuple[int, ...]
    dtype: str  # "fp32", "fp16", "bf16"
    conv: tuple[int, ...] = ()
    layout: str = ""

    @property
    def key(self) -> str:
        params = "+" + "x".join(map(str, self.conv)) if self.conv else ""
        params += "+" + self.layout if self.layout else ""
        return f"{self.op}:{'x'.join(map(str, self.dims))}{params}:{self.dtype}"


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def padded(shape: Shape) -> Shape:
    """The shape with every GEMM dim (a convolution's channels, per group) padded to a multiple of ALIGN."""
    if shape.op != "conv":
        dims = tuple(_aligned(d) for d in shape.dims[:3]) + shape.dims[3:]
        return Shape(shape.op, dims, shape.dtype, layout=shape.layout)
    n, _c, h, w, o, ci, kh, kw = shape.dims
    groups = shape.conv[6] if shape.conv else 1
    per_group_in, per_group_out = _aligned(ci), _aligned(o // groups)
    dims = (n, per_group_in * groups, h, w, per_group_out * groups, per_group_in, kh, kw)
    return Shape("conv", dims, shape.dtype, shape.conv)


def _conv_params(concrete: list | None) -> tuple[int, ...] | None:
    """(stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups) from aten::convolution's Concrete Inputs
    (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups), () where they are
    not recorded, None for a transposed convolution (not timed: conv_transpose has other kernels)."""
    if not concrete or len(concrete) < 9:
        return ()
    try:
        stride, padding, dilation = (
            [int(v) for v in str(concrete[i]).strip("[]").split(",")] for i in (3, 4, 5)
        )
        transposed, groups = str(concrete[6]).strip(), int(concrete[8])
    except ValueError:
        return ()
    if transposed == "True":
        return None
    if not (len(stride) == len(padding) == len(dilation) == 2):
        return ()
    return (*stride, *padding, *dilation, groups)


def _column_major(dims: list, strides: object) -> bool:
    """Whether a matrix operand's recorded strides make it column-major (a transposed view)."""
    if not isinstance(strides, list) or len(strides) != len(dims) or len(dims) < 2:
        return False
    return strides[-2] == 1 and strides[-1] != 1 and dims[-2] > 1


def shape_of(
    name: str, shapes: list, dtypes: list, concrete: list | None = None, strides: list | None = None
) -> Shape | None:
    """The calibration shape of one torch op (aten::mm/addmm/bmm/baddbmm/convolution), None otherwise.
    `concrete`: the op's recorded Concrete Inputs (a convolution's stride, padding, dilation, groups);
    `strides`: its recorded Input Strides (a GEMM operand's layout)."""
    dtype = next((DTYPES[str(d).lower()] for d in dtypes if str(d).lower() in DTYPES), None)
    if dtype is None:
        return None
    if name == "aten::convolution":
        if len(shapes) < 2 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
            return None
        params = _conv_params(concrete)
        if params is None:
            return None
        return Shape("conv", (*shapes[0], *shapes[1]), dtype, params)
    mats = [i for i, s in enumerate(shapes) if isinstance(s, list) and len(s) in (2, 3)]
    if len(mats) < 2:
        return None
    a, b = shapes[mats[-2]], shapes[mats[-1]]
    recorded = strides if isinstance(strides, list) and len(strides) == len(shapes) else None
    layout = (
        "".join("t" if _column_major(shapes[i], recorded[i]) else "n" for i in mats[-2:]) if recorded else ""
    )
    layout = "" if layout == "nn" else layout
    if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return Shape("mm", (a[0], b[1], a[1]), dtype, layout=layout)
    if len(a) == 3 and len(b) == 3 and a[2] == b[1] and a[0] == b[0]:
        return Shape("bmm", (a[1], b[2], a[2], a[0]), dtype, layout=layout)
    return None


class RunShape(NamedTuple):
    """A shape of the run, its share of the run's GEMM/conv device time, and its device time per call in
    the run (what the calibration's "current" timing should come close to)."""

    shape: Shape
    share: float
    run_us: float


def top_shapes(ops, top: int, recorded: Mapping[tuple[int, int], dict] | None = None) -> list[RunShape]:
    """The `top` GEMM/conv shapes of the measured steps by device time (ops: Profile.ops from the torch
    pass; recorded: each GEMM/conv op's trace args by (tid, start_ns), for its Concrete Inputs and Input
    Strides, which Profile.ops does not keep)."""
    if ops is None or len(ops) == 0:
        return []
    ops = ops.reset_index(drop=True)
    device_ns = op_subtree_device_ns(ops).to_numpy(float)
    wanted = np.flatnonzero(ops["name"].isin(list(GEMM_OPS)).to_numpy() & (ops["step"] >= 0).to_numpy())
    totals: dict[Shape, float] = {}
    calls: dict[Shape, int] = {}
    for i in wanted:
        row = ops.iloc[i]
        args = (recorded or {}).get((int(row["tid"]), int(row["start_ns"]))) or {}
        shape = shape_of(
            row["name"],
            list(row["shapes"] or []),
            list(row["dtypes"] or []),
            args.get("Concrete Inputs"),
            args.get("Input Strides"),
        )
        if shape is not None:
            totals[shape] = totals.get(shape, 0.0) + float(device_ns[i])
            calls[shape] = calls.get(shape, 0) + 1
    whole = sum(totals.values())
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:top]
    return [
        RunShape(shape, ns / whole if whole else 0.0, ns / calls[shape] / NS_PER_US) for shape, ns in ranked
    ]


def timed_rows(calibration: Mapping, dtype: str, variant: str) -> list[dict]:
    """The calibrated shapes of `dtype` timed both as they ran and in `variant`."""
    rows = calibration.get("shapes")
    return [
        r
        for r in (rows if isinstance(rows, list) else [])
        if isinstance(r, dict)
        and r.get("dtype") == dtype
        and isinstance(r.get("us"), dict)
        and all(isinstance(r["us"].get(v), (int, float)) and r["us"][v] > 0 for v in ("current", variant))
    ]


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def weighted_speedup(rows: list[dict], variant: str) -> float:
    """Speedup of `variant` over the current precision across `rows`: each shape keeps its share of the
    GEMM time, shrunk by its own ratio."""
    shares = np.array([max(_number(r.get("share")), 1e-9) for r in rows])
    ratio = np.array([r["us"][variant] / r["us"]["current"] for r in rows])
    return float(shares.sum() / (shares * ratio).sum())


def speedups(calibration: Mapping) -> dict[str, float]:
    """'fp32->tf32' -> the share-weighted speedup of each proposal timed in `calibration`."""
    out: dict[str, float] = {}
    for dtype, variants in PROPOSALS.items():
        for variant in variants:
            rows = timed_rows(calibration, dtype, variant)
            if rows:
                out[f"{dtype}->{variant}"] = weighted_speedup(rows, variant)
    return out


def summary(calibration: Mapping) -> str:
    """What a calibration gave the diagnosis, in a line (the cost section's `contributed`)."""
    rows = calibration.get("shapes") or []
    if not rows:
        return str(calibration.get("note") or "no GEMM/convolution shape was timed")
    found = ", ".join(f"{name} {fmt(value)}x" for name, value in speedups(calibration).items())
    untimed = calibration.get("untimed") or []
    return (
        f"the speedups the fixes are replayed with, measured on {calibration.get('device')}: "
        f"{len(rows)} GEMM/conv shape(s) of this run timed ({found or 'no proposal timed'})"
        + (f"; {len(untimed)} more not timed ({untimed[0].get('why')})" if untimed else "")
    )
