"""What one torch op call costs, modeled from its recorded input shapes and dtypes: the DRAM bytes it moves,
the FLOPs it does, its GEMM dims and its precision (estimates, not counters: ncu measures where it ran).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

OP_DTYPE_PRECISION = {
    "float": "fp32",
    "c10::half": "fp16",
    "c10::bfloat16": "bf16",
    "double": "fp64",
    "c10::float8_e4m3fn": "fp8",
    "c10::float8_e5m2": "fp8",
}
DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "c10::half": 2,
    "c10::bfloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
    "c10::complex<float>": 8,
}
# Reductions write a tensor much smaller than their input: bytes are the inputs only.
REDUCTION_OPS = {
    "aten::sum",
    "aten::mean",
    "aten::amax",
    "aten::amin",
    "aten::max",
    "aten::min",
    "aten::norm",
    "aten::linalg_vector_norm",
    "aten::argmax",
    "aten::argmin",
    "aten::var",
    "aten::std",
}
# Ops whose GEMM dims we check (leaf ops only: linear/matmul decompose into these).
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"}
CONV_OPS = {"aten::convolution"}


def _numel(shape) -> int:
    # A TensorList input (aten::_foreach_*, aten::cat) records one shape per tensor.
    if any(isinstance(dim, list) for dim in shape):
        return sum(_numel(inner) for inner in shape if isinstance(inner, list))
    return int(np.prod(shape)) if shape else 1


def _dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES.get(str(dtype).lower(), 4)


def op_bytes(name: str, shapes: list, dtypes: list) -> float:
    """Estimated DRAM bytes of one op call from its input shapes and dtypes (each tensor touched once;
    for matmuls A + B + C, otherwise inputs plus an output as large as the largest input)."""
    tensors = [
        (s, d) for s, d in zip(shapes or [], dtypes or [], strict=False) if isinstance(s, list) and s and d
    ]
    if not tensors:
        return 0.0
    sizes = [_numel(s) * _dtype_bytes(d) for s, d in tensors]
    if name in MATMUL_OPS and len(tensors) >= 2:
        a, b = tensors[-2][0], tensors[-1][0]
        out = _numel(a[:-1]) * b[-1] * _dtype_bytes(tensors[-1][1])
        return float(sum(sizes[-2:]) + out)
    if name in REDUCTION_OPS:
        return float(sum(sizes))
    return float(sum(sizes) + max(sizes))


def _matmul_operands(name: str, shapes: list) -> tuple[list, list] | None:
    """The two matrices of a matmul call: the last two inputs of 2+ dims (addmm and baddbmm lead with
    the bias or input and end with the scalars alpha and beta, recorded as []: taking the last two
    entries missed every addmm, among them tc_fp16_unaligned's 7 ms vocabulary projection), the first
    two of _scaled_mm (its scales follow)."""
    if name not in MATMUL_OPS:
        return None
    mats = [s for s in (shapes or []) if isinstance(s, list) and len(s) >= 2]
    if len(mats) < 2:
        return None
    a, b = mats[:2] if name == "aten::_scaled_mm" else mats[-2:]
    return a, b


def op_flops(name: str, shapes: list, torch_flops: float) -> float:
    """torch's FLOP count when it recorded one, else 2*M*N*K (x batch) for matmuls from their shapes;
    0 for other ops (elementwise math is negligible next to the bytes it moves)."""
    if torch_flops is not None and not np.isnan(torch_flops):
        return float(torch_flops)
    operands = _matmul_operands(name, shapes)
    if operands is None:
        return 0.0
    a, b = operands
    return 2.0 * _numel(a) * b[-1]


def op_gemm_dims(name: str, shapes: list) -> list[int]:
    """The M/N/K (or conv channel) dims of a matmul/conv call, empty when not one."""
    operands = _matmul_operands(name, shapes)
    if operands is not None:
        a, b = operands
        return [a[-2], a[-1], b[-1]]
    shapes = [s for s in (shapes or []) if isinstance(s, list)]
    if name in CONV_OPS and len(shapes) >= 2 and len(shapes[0]) >= 2 and len(shapes[1]) >= 2:
        return [shapes[0][1], shapes[1][0]]
    return []


def op_precision(dtypes) -> str | None:
    """Precision of an op call from its first typed input (torch dtype names)."""
    for d in dtypes or []:
        if d:
            return OP_DTYPE_PRECISION.get(str(d).lower())
    return None


# The backward convolution, which torch counts no FLOPs for: ops_flops takes them from its shapes.
CONV_BACKWARD_OP = "aten::convolution_backward"


def ops_flops(ops: pd.DataFrame) -> np.ndarray:
    """Each row's FLOPs: the one per-op FLOP estimate, which the roofline places and the
    est_flops_per_step metric sums. torch's count or the matmul formula (op_flops); for
    aten::convolution_backward, which torch counts none for, two products the size of the forward's from
    its shapes (grad_output, input, weight): the input's gradient and the weight's (the first layer,
    whose input needs no gradient, is counted twice: 1 of resnet50's 53 convolutions). Without them a
    convolutional net's step read a third of its work: resnet50 b64 (tests/fixtures/runs/h200-resnet50)
    262 GFLOP, where its forward and backward convolutions and matmuls come to 785. Each count then sits
    on an op that ran kernels (_handed_to_kernels)."""
    # torch's counts as they are; only the uncounted matmuls read their shapes (op_flops), where a call per
    # row cost 0.44 s for the 105,825 ops of launch_per_sample_loss's trace.
    recorded = ops["flops"].to_numpy(dtype=float, na_value=np.nan)
    out = np.nan_to_num(recorded, nan=0.0)
    names = ops["name"].to_numpy()
    op_shapes = ops["shapes"].to_numpy()
    for i in np.flatnonzero(np.isnan(recorded) & ops["name"].isin(MATMUL_OPS).to_numpy()):
        out[i] = op_flops(names[i], op_shapes[i], np.nan)
    for i in np.flatnonzero(names == CONV_BACKWARD_OP):
        if out[i] > 0:
            continue
        shapes = [s for s in (ops["shapes"].iat[i] or []) if isinstance(s, list)]
        if len(shapes) >= 3 and len(shapes[0]) == 4 and len(shapes[2]) == 4:
            grad_out, weight = shapes[0], shapes[2]
            out[i] = 2 * 2.0 * float(np.prod(grad_out)) * weight[1] * weight[2] * weight[3]
    return _handed_to_kernels(ops, out)


def _handed_to_kernels(ops: pd.DataFrame, flops: np.ndarray) -> np.ndarray:
    """`flops` with each counted op that ran no kernel itself handing its FLOPs to the op under it (same
    thread, nested in time) that ran the most GPU time. torch counts a forward convolution on
    aten::conv2d, whose kernels run under aten::convolution -> aten::cudnn_convolution: left there,
    resnet50 b64's roofline covered 17.2 of its 31.4 ms of kernels, none of them a convolution, and read
    "memory-bound, 45.7 GFLOP/s" for a step of 1.57 TFLOP."""
    out = flops.copy()
    device = ops["device_ns"].to_numpy()
    tids, starts, ends = (ops[c].to_numpy() for c in ("tid", "start_ns", "end_ns"))
    handing = np.flatnonzero((out > 0) & (device == 0))
    for tid in np.unique(tids[handing]):
        on_thread = np.flatnonzero(tids == tid)
        order = on_thread[np.argsort(starts[on_thread], kind="stable")]
        sorted_starts = starts[order]
        for i in handing[tids[handing] == tid]:
            inside = order[
                np.searchsorted(sorted_starts, starts[i], side="left") : np.searchsorted(
                    sorted_starts, ends[i], side="right"
                )
            ]
            inside = inside[(inside != i) & (out[inside] == 0) & (device[inside] > 0)]
            if inside.size:
                out[inside[np.argmax(device[inside])]] = out[i]
                out[i] = 0.0
    return out
