"""What each kernel is (a GEMM, a convolution, a normalization, ...) and in which precision its math ran.

Precision comes from measurements where ncu profiled the kernel: the executed FLOPs per pipe (tensor-core
ops per source precision, scalar fp64/fp32/fp16 instructions; nsight/ncu_metrics.py) decide, as the pipe
that needs the most time at its peak (a TF32 conv also runs a few fp32 FLOPs in its epilogue; a bf16
autocast batch norm computes in fp32). Elsewhere the kernel's name is read: library GEMM and convolution
names carry their types (cuBLAS `sm90_xmma_gemm_f32f32_tf32f32_f32` is TF32, nvjet `nvjet_sm90_tst_...`
bf16, `_hsh_` fp16; CUTLASS `tensorop_s1688gemm` TF32, `simt_sgemm` fp32; cuDNN templates `tfloat32_t`),
other kernels their template's element type (`batch_norm_..._kernel<c10::BFloat16, float>` is bf16). nvjet's
`tst` is bf16, not TF32 (measured).
Every classification says which of the two it came from.

The kind decides what may be advised: only GEMMs, convolutions and attention (MATMUL_KINDS) can move to
tensor cores; normalization, pooling, softmax, reductions and elementwise kernels cannot, whatever their
precision.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping

import numpy as np
import pandas as pd

from hybrid.hardware import Peaks
from hybrid.profile import Profile
from hybrid.provenance import MEASURED_NCU
from nsight.ncu import function_base_name

FROM_NAME = "kernel name"

MATMUL_KINDS = ("gemm", "conv", "attention")
KINDS = (
    "communication",
    *MATMUL_KINDS,
    "gemv",
    "normalization",
    "softmax",
    "pooling",
    "reduction",
    "copy",
    "elementwise",
    "other",
)

# Checked in order; the first that matches names the kind. Helpers that sit beside GEMMs in cuBLAS/cuDNN
# (split-K reductions, epilogues, layout transforms, workspace init) come before the GEMM patterns.
_KIND_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        ("communication", r"^(?:void )?nccl"),
        ("reduction", r"^triton_(?:red|per)_"),
        ("elementwise", r"^triton_poi_"),
        ("gemm", r"^triton_tem_.*(?:mm|gemm)"),
        ("conv", r"^triton_tem_.*conv"),
        ("attention", r"fmha|flash_fwd|flash_bwd|flash::|attention|_sdpa"),
        (
            "normalization",
            (
                r"batch_?norm|\bbn_(?:fw|bw)|::bn_|layer_?norm|group_?norm|rms_?norm|instance_?norm"
                r"|GammaBetaBackward"
            ),
        ),
        ("softmax", r"softmax"),
        ("pooling", r"pool|adaptive_average_gradinput"),
        ("reduction", r"splitKreduce|ReduceSplitK|reduce_wgrad"),
        ("elementwise", r"cublasLt::epilogue|\bscal_kernel|scalePackedTensor"),
        ("other", r"init_device_workspace"),
        ("copy", r"nchwToNhwc|nhwcToNchw|nhwcAddPadding|flip_filter|direct_copy|CatArray|transpose"),
        # PyTorch's native depthwise convolutions run on CUDA cores whatever the precision flags: no TF32 or
        # tensor-core switch moves them (the torchvision detector's MobileNet backbone: 32% of the time its
        # FP32 finding claimed TF32 would speed up, with TF32 already allowed for cuDNN).
        ("other", r"conv_depthwise[23]d"),
        ("conv", r"conv(?!ert)|fprop|dgrad|wgrad|winograd|fft2d_"),
        ("gemv", r"gemv"),
        ("gemm", r"gemm|nvjet|cutlass|cublas|xmma|wgmma|hgmma|matmul"),
        (
            "reduction",
            r"reduce|reduction|scan|cumsum|nll_loss|argmax|argmin|radix_sort::DeviceRadixSortExclusiveSum",
        ),
        (
            "elementwise",
            (
                r"elementwise|vectorized|unrolled|multi_tensor_apply|pointwise|FillFunctor|amp_update_scale"
                r"|amp_foreach|distribution_|dropout|_kernel_cuda"
            ),
        ),
    )
)

# A GEMM or convolution name carries several types (inputs, math, accumulator, output): the narrowest
# tensor-core type present is the one its math ran in (`f32f32_tf32f32_f32`: fp32 in, TF32 math).
_MATMUL_PRECISION = tuple(
    (p, re.compile(rx, re.IGNORECASE))
    for p, rx in (
        ("fp8", r"e4m3|e5m2|fp8|float8|qgmma"),
        ("int8", r"i8i8|int8|imma"),
        ("bf16", r"bf16|bfloat16"),
        ("fp16", r"f16|fp16|half|hgemm|h1688|h16816|h884|hmma"),
        ("tf32", r"tf32|tfloat32|tensorop_s\d"),
        ("fp64", r"f64|fp64|double|dgemm|d884|dmma"),
        ("fp32", r"f32|fp32|float|sgemm|ffma|simt_s|single"),
    )
)
# nvjet (cuBLAS on Hopper) names start with a type code (A/B, compute, C/D): `hsh` is fp16 in and out with
# fp32 compute, `tst` bf16 (ncu measured bf16 tensor FLOPs in nvjet_sm90_tst kernels of two bf16 captures,
# graph_unfused_small_ops and healthy_bf16_gemm; it is not TF32). Codes no capture has shown stay unread.
_NVJET = re.compile(r"nvjet_sm\d+_([a-z])[a-z]{2}_", re.IGNORECASE)
_NVJET_TYPES = {"h": "fp16", "t": "bf16"}
# cuDNN's generated kernels (its fused SDPA among them) say `f16` for any 16-bit type: ncu measured bf16
# tensor FLOPs in cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16 kernels of a bf16 autocast
# ViT.
_CUDNN_GENERATED_16BIT = re.compile(r"cudnn_generated.*_f16_", re.IGNORECASE)
# PyTorch's memory-efficient attention (CUTLASS fmha) runs float inputs on TF32 tensor cores from sm80 on,
# whatever allow_tf32 says: ncu measured TF32 tensor FLOPs in fmha_cutlassB_f32_..._sm80 of a GPT-2 run with
# TF32 off.
_MEM_EFFICIENT_F32 = re.compile(r"fmha_cutlass[FB]_f32_", re.IGNORECASE)
# Any other kernel: the first element type in its name (template arguments list the stored type before
# the accumulator: `softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, ...>` is bf16). bfloat16 and
# tfloat32 are tried before the float inside them.
_ELEMENT_TYPE = re.compile(
    r"(?P<fp8>float8|e4m3|e5m2)|(?P<bf16>bfloat16|bf16)|(?P<tf32>tfloat32|tf32)"
    r"|(?P<fp16>float16|half\b|c10::Half|__half|fp16)|(?P<fp64>double|f64\b)"
    r"|(?P<fp32>float|f32\b)",
    re.IGNORECASE,
)

_LAMBDA_PARAMS = re.compile(r"lambda\(([^()]+)\)")

# Pipes whose executed FLOPs ncu counts (hybrid.profile COUNTER_COLUMNS), with the peak (hardware.Peaks key)
# each runs at and the precision it stands for.
TENSOR_PIPES = {"bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "fp8": "fp8", "fp64": "fp64_tensor"}
SCALAR_PIPES = {
    "fp32_flops": ("fp32", "fp32"),
    "fp64_flops": ("fp64", "fp64"),
    "fp16_flops": ("fp16_scalar", "fp16"),
}


_GENERIC_WRAPPERS = ("kernel", "kernel2")
_FIRST_TEMPLATE_ARG = re.compile(r"<\s*(?:void\s+)?((?:[A-Za-z_]\w*::)*[A-Za-z_]\w*)")


def kernel_label(name: str) -> str:
    """A short name that tells kernels apart: the function's base name, or for CUTLASS's generic wrappers
    (`cutlass::Kernel2<cutlass_80_simt_sgemm_...>`) the kernel class they instantiate."""
    base = function_base_name(name)
    if base.lower() in _GENERIC_WRAPPERS:
        inner = _FIRST_TEMPLATE_ARG.search(name)
        if inner:
            return inner.group(1).rsplit("::", 1)[-1]
    return base


@functools.lru_cache(
    maxsize=1 << 16
)  # pure in the name: each distinct name is classified once, not per reader
def kernel_kind(name: str) -> str:
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(name):
            return kind
    return "other"


@functools.lru_cache(maxsize=1 << 16)
def name_precision(name: str, kind: str | None = None) -> str | None:
    """The precision a kernel's name states, or None when it states none (a Triton kernel, an integer one)."""
    kind = kind or kernel_kind(name)
    if kind in (*MATMUL_KINDS, "gemv"):
        if _CUDNN_GENERATED_16BIT.search(name):
            return None
        if _MEM_EFFICIENT_F32.search(name):
            return "tf32"
        nvjet = _NVJET.search(name)
        if nvjet:
            return _NVJET_TYPES.get(nvjet.group(1).lower())
        return next((p for p, rx in _MATMUL_PRECISION if rx.search(name)), None)
    # PyTorch's elementwise kernels name their element type in the functor lambda's parameters; the
    # enclosing function's own parameters can hold other types
    # (batch_norm_update_stats_and_invert(..., double momentum)). A reduction's lambda takes its
    # accumulator type instead: its ReduceOp<T> names the data.
    for params in _LAMBDA_PARAMS.findall(name) if kind in ("elementwise", "copy", "normalization") else ():
        typed = _ELEMENT_TYPE.search(params)
        if typed:
            return typed.lastgroup
    first = _ELEMENT_TYPE.search(name)
    return first.lastgroup if first else None


def flops_by_pipe(row: Mapping) -> dict[str, float]:
    """Executed FLOPs per pipe of one counter row: `tensor:<precision>` and the scalar `fp32`/`fp64`/`fp16`;
    pipes ncu did not measure (NaN) or that did nothing are left out."""
    out: dict[str, float] = {}
    by_precision = row.get("tensor_flops_by_precision")
    if isinstance(by_precision, Mapping):
        for precision, value in by_precision.items():
            if value is not None and not math.isnan(float(value)) and float(value) > 0:
                out[f"tensor:{precision}"] = float(value)
    for column, (_, precision) in SCALAR_PIPES.items():
        value = row.get(column)
        if value is not None and not math.isnan(float(value)) and float(value) > 0:
            out[precision] = float(value)
    return out


def pipe_peak(pipe: str, peaks: Peaks | None) -> float | None:
    if peaks is None:
        return None
    if pipe.startswith("tensor:"):
        key = TENSOR_PIPES.get(pipe.split(":", 1)[1])
    else:
        key = next((k for k, p in SCALAR_PIPES.values() if p == pipe), None)
    return peaks.flops(key) if key else None


def pipe_precision(pipe: str) -> str:
    """The precision label of a pipe, which is also its peak's key in hardware.Peaks: `bf16` for tensor bf16,
    `fp32` for scalar fp32, `fp64_tensor` for DMMA, `fp16_scalar` for HFMA2 (ncu counts bf16 scalar math there
    too, so a bf16 model's elementwise kernels show it)."""
    if pipe.startswith("tensor:"):
        return TENSOR_PIPES.get(pipe.split(":", 1)[1], pipe.split(":", 1)[1])
    return next((key for key, label in SCALAR_PIPES.values() if label == pipe), pipe)


def dominant_pipe(by_pipe: Mapping[str, float], peaks: Peaks | None) -> str | None:
    """The pipe that needs the most time at its peak for its FLOPs (the most FLOPs where a peak is
    unknown)."""
    if not by_pipe:
        return None

    def weight(pipe: str) -> float:
        peak = pipe_peak(pipe, peaks)
        return by_pipe[pipe] / peak if peak else by_pipe[pipe] / 1e12

    return max(by_pipe, key=weight)


def pipe_unit(pipe: str) -> str:
    """The hardware a pipe's FLOPs run on: every tensor precision on the tensor cores, scalar fp32 and fp16 on
    the FMA units, scalar fp64 on the FP64 units. Work on one unit queues; the units run side by side."""
    if pipe.startswith("tensor:"):
        return "tensor"
    return "fp64" if pipe == "fp64" else "fma"


def compute_ceiling(by_pipe: Mapping[str, float], peaks: Peaks | None) -> float | None:
    """The FLOP rate at which this FLOP mix finishes with every pipe at its peak: each unit (pipe_unit) needs
    the sum of its pipes' FLOPs / peak, the units run side by side, so the mix takes the longest unit's time
    and the ceiling is total FLOPs / that time. An upper bound on what the kernel can reach (one precision:
    that precision's peak); None when a pipe it used has no known peak."""
    total = sum(by_pipe.values())
    if total <= 0:
        return None
    unit_time: dict[str, float] = {}
    for pipe, flops in by_pipe.items():
        peak = pipe_peak(pipe, peaks)
        if not peak:
            return None
        unit_time[pipe_unit(pipe)] = unit_time.get(pipe_unit(pipe), 0.0) + flops / peak
    return total / max(unit_time.values())


def measured_class(row: Mapping, peaks: Peaks | None) -> tuple[str | None, bool | None]:
    """(precision, tensor cores used) from one counter row; (None, None) when it measured no FLOPs."""
    pipe = dominant_pipe(flops_by_pipe(row), peaks)
    if pipe is None:
        return None, None
    return pipe_precision(pipe), pipe.startswith("tensor:")


def classify_kernels(
    names: pd.Series, counters: pd.DataFrame | None = None, peaks: Peaks | None = None
) -> pd.DataFrame:
    """Per kernel name (the index of the result, unique): `kind`, `precision`, `precision_source`
    (measured:ncu where a counter row of that name measured FLOPs, else the kernel name) and `tensor_core`
    (measured only). Counter rows of one name are pooled, FLOPs summed per pipe."""
    unique = pd.Index(pd.unique(pd.Series(np.asarray(pd.unique(names), dtype=object)).astype(str)))
    kinds = [kernel_kind(n) for n in unique]
    frame = pd.DataFrame(
        {
            "kind": kinds,
            "precision": [name_precision(n, k) for n, k in zip(unique, kinds, strict=False)],
            "precision_source": FROM_NAME,
            "tensor_core": None,
        },
        index=unique,
        dtype=object,
    )
    if counters is None or counters.empty:
        return frame
    pooled: dict[str, dict[str, float]] = {}
    for row in counters.to_dict("records"):
        name = str(row["name"])
        if name not in frame.index:
            continue
        target = pooled.setdefault(name, {})
        for pipe, flops in flops_by_pipe(row).items():
            target[pipe] = target.get(pipe, 0.0) + flops
    for name, by_pipe in pooled.items():
        pipe = dominant_pipe(by_pipe, peaks)
        if pipe is None:
            continue
        frame.loc[name, ["precision", "precision_source", "tensor_core"]] = [
            pipe_precision(pipe),
            MEASURED_NCU,
            pipe.startswith("tensor:"),
        ]
    return frame


def _distinct(names: pd.Series) -> pd.Series:
    """The distinct names as text, found before any text is made (a million launches, a few hundred names)."""
    return pd.Series(np.asarray(pd.unique(names), dtype=object)).astype(str)


def profile_kernel_classes(profile: Profile, names: pd.Series, peaks: Peaks | None) -> pd.DataFrame:
    """classify_kernels for these kernel names, measured from the profile's counter rows (named as the
    timeline names the kernels they matched by launch or configuration) where ncu ran.
    Every name of the profile's kernels and counter rows is classified once, on the first call (metrics,
    roofline and ledger asked 3 times per resnet50 analysis); the result is indexed by name, a superset of
    `names` (each name's class depends on its own counter rows only)."""
    counters = profile.counters if len(profile.counters) else None
    inputs = (profile.kernels, profile.counters)
    held = profile.derived.get("kernel_classes")
    if held is None or any(a is not b for a, b in zip(held[0], inputs, strict=True)) or held[1] != peaks:
        counter_names = [counters["name"]] if counters is not None else []
        every = pd.concat([_distinct(profile.kernels["name"]), *counter_names])
        held = profile.derived["kernel_classes"] = (inputs, peaks, classify_kernels(every, counters, peaks))
    classes = held[2]
    if not pd.Index(_distinct(names)).isin(classes.index).all():
        return classify_kernels(names, counters, peaks)  # names from elsewhere (a renamed counter frame)
    return classes.copy()


def per_kernel(names: pd.Series, classes: pd.DataFrame, column: str) -> np.ndarray:
    """`column` of classify_kernels' result for each entry of `names` (looked up once per distinct name)."""
    codes, distinct = pd.factorize(names, use_na_sentinel=False)
    distinct = pd.Series(np.asarray(distinct, dtype=object)).astype(str)
    return classes[column].reindex(distinct).to_numpy(dtype=object)[codes]


def matmul_precision(names: pd.Series) -> pd.Series:
    """Each kernel's precision as its name states it where the kernel is a GEMM, convolution or attention
    kernel ("unknown" where the name states none), None for every other kind (classified per unique name)."""
    classes = classify_kernels(names)
    matmul = classes["kind"].isin(MATMUL_KINDS)
    labels = classes["precision"].where(~matmul | classes["precision"].notna(), "unknown").where(matmul, None)
    return pd.Series(per_kernel(names, labels.to_frame("precision"), "precision"), index=names.index)
