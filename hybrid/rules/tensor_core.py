"""Matmuls and convolutions that do not use tensor cores, or use them badly."""

from __future__ import annotations

from hybrid.provenance import ESTIMATED
from hybrid.rules.advice import Suggestion, enable_tf32, use_autocast, use_compile
from hybrid.rules.base import Context, Evidence, Fix, FixInputs, Inputs, NoFix, NotMeasured, Report, Rule
from hybrid.rules.common import PRACTICAL_ROOFLINE_PCT
from hybrid.rules.switches import COMPILE, CUDNN_BENCHMARK, TF32

MIN_LOST_PCT = 2.0
# Without FLOPs for the misaligned calls, assume NVIDIA's Matrix Multiplication guide's ~2x slowdown of
# such shapes: half their time recoverable (an upper-end estimate, labelled as such).
MISALIGNED_SLOWDOWN_SHARE = 0.5
# GEMM kernels spending most of the step yet keeping the tensor pipe under 30% busy.
LOW_TENSOR_PIPE_PCT = 30.0
GEMM_SHARE_PCT = 20.0
MISALIGNED_INPUTS = (
    "misaligned_gemm_device_ms",
    "misaligned_gemm_flops",
    "misaligned_gemm_bytes",
    "misaligned_gemm_precision",
)


def fp32_gemm_lost_ms(fp32_gemm_ms: float, fp32_peak: float | None, fast_peak: float | None) -> float:
    """FP32 GEMMs run on CUDA cores; on TF32/BF16 tensor cores they scale by the ratio of the peaks."""
    if not fp32_peak or not fast_peak or fast_peak <= fp32_peak:
        return 0.0
    return fp32_gemm_ms * (1.0 - fp32_peak / fast_peak)


def misaligned_lost_ms(misaligned_ms: float, achieved_pct: float | None) -> float:
    """Aligned, the same GEMMs run on full-width tensor-core tiles at about the practical roofline
    (PRACTICAL_ROOFLINE_PCT, as cuBLAS reaches on aligned shapes): the time beyond that is lost. Without
    an achieved figure, the guide's ~2x slowdown."""
    if achieved_pct is None:
        return misaligned_ms * MISALIGNED_SLOWDOWN_SHARE
    return misaligned_ms * max(0.0, 1.0 - achieved_pct / PRACTICAL_ROOFLINE_PCT)


def misaligned_achieved_pct(
    ms: float | None, flops: float | None, nbytes: float | None, peak: float | None, bandwidth: float | None
) -> float | None:
    """Where the misaligned calls sit on the roofline: their FLOP rate over what the roofline allows at
    their arithmetic intensity (FLOPs and bytes modeled from shapes, time measured)."""
    if not ms or not flops or not nbytes or not peak or not bandwidth:
        return None
    attainable = min(peak, flops / nbytes * bandwidth)
    return 100.0 * (flops / (ms / 1e3)) / attainable


def _misaligned_achieved(values, peaks) -> float | None:
    peak = peaks.get("flops_per_s", {}).get(values["misaligned_gemm_precision"] or "fp16")
    return misaligned_achieved_pct(
        values["misaligned_gemm_device_ms"],
        values["misaligned_gemm_flops"],
        values["misaligned_gemm_bytes"],
        peak,
        peaks.get("dram_bytes_per_s"),
    )


def pipe_idle_lost_ms(gemm_ms: float, pipe_pct: float) -> float:
    return gemm_ms * (1.0 - pipe_pct / 100.0) * (1.0 - LOW_TENSOR_PIPE_PCT / 100.0)


def _names(ctx: Context, metric: str) -> tuple[str, ...]:
    """The entries of a '; '-joined name metric (kernels or layers with their share), for applies_to."""
    value = ctx.value(metric) or ""
    return tuple(part for part in str(value).split("; ") if part)


def fp32_gemm_advice(ctx: Context) -> list[Suggestion]:
    """TF32 for the families whose FP32 kernels took the time (unless on), mixed precision (unless an autocast
    region ran); with TF32 already on and the kernels measured FP32, why TF32 did not apply."""
    config = ctx.config
    targets = _names(ctx, "gemm_fp32_layers") or _names(ctx, "gemm_fp32_kernels")
    fp32_ms = ctx.value("gemm_fp32_ms", 0.0)
    matmul_ms, conv_ms = ctx.value("gemm_fp32_matmul_ms", 0.0), ctx.value("gemm_fp32_conv_ms", 0.0)
    measured = ctx.value("gemm_fp32_measured_pct")
    how = (
        f"ncu measured FP32 math and no tensor-core work for {measured:.0f}% of that time, "
        "kernel names say FP32 for the rest"
        if measured
        else "their kernel names say FP32; ncu did not profile them"
    )
    condition = f"{fp32_ms:.3g} ms a step of FP32 GEMM/convolution kernels ({how})"
    out = enable_tf32(config, matmul=matmul_ms > 0, conv=conv_ms > 0, condition=condition, applies_to=targets)
    on = [
        family
        for family, flag, ms in (
            ("matmul", config.tf32_matmul, matmul_ms),
            ("cuDNN conv", config.tf32_conv, conv_ms),
        )
        if flag and ms > 0
    ]
    if on:
        out.append(
            Suggestion(
                "Find why these kernels stayed FP32 although TF32 is allowed: fp32 GEMVs and batched "
                "shapes cuBLAS has no TF32 kernel for, convolutions cuDNN ran with a non-tensor algorithm "
                "(try torch.backends.cudnn.benchmark=True), or TF32 turned off again later in the script",
                f"{condition}; TF32 is on for {' and '.join(on)} in this run"
                + ("" if ctx.config.recorded else " (TF32 kernels of that family ran in the same steps)"),
                targets,
            )
        )
    out += use_autocast(config, condition=condition, applies_to=targets)
    if config.autocast_dtypes:
        out.append(
            Suggestion(
                "Move these matmuls/convolutions inside the autocast region, or check they are ops "
                "autocast casts (torch.mm/conv/linear are; custom kernels and torch.bmm under some dtypes "
                "are not)",
                f"{condition}; autocast({', '.join(config.autocast_dtypes)}) regions ran, "
                "yet these stayed FP32",
                targets,
            )
        )
    return out


def fp32_model(inp: Inputs) -> float | None:
    if inp["gemm_fp32_ms"] <= 0:
        return None
    flops = inp.peaks.get("flops_per_s", {})
    return fp32_gemm_lost_ms(inp["gemm_fp32_ms"], flops.get("fp32"), flops.get("tf32"))


def fp32_report(ctx: Context, lost_ms: float) -> Report:
    return Report(
        title="Matrix multiplies run in full FP32 without tensor cores",
        pairs=[
            ("FP32 GEMM time per step", "gemm_fp32_ms"),
            ("FP32 share of GEMM time", "gemm_fp32_time_pct"),
            ("of it with the precision measured by ncu", "gemm_fp32_measured_pct"),
            ("kernels", "gemm_fp32_kernels"),
            ("layers", "gemm_fp32_layers"),
            ("FP32 share of matmul FLOPs", "matmul_fp32_flops_pct"),
            ("tensor pipe busy in the profiled GEMMs", "ncu_gemm_tensor_pipe_pct"),
        ],
        explanation=(
            "GEMM and convolution kernels ran in FP32 on CUDA cores (by ncu's FLOP counters where it "
            "profiled them, else by their names); TF32 or BF16 tensor cores have several times the peak. "
            "Normalization, pooling, softmax and elementwise kernels are not counted. Time lost: the step "
            "replayed with these kernels at the TF32 speedup measured on this GPU for this run's shapes "
            "(the calibration pass), else the datasheet's ratio of the FP32 and TF32 peaks. This finding "
            "owns the FP32 GEMM time: the idle tensor pipe ncu sees in them is its evidence, not a second "
            "finding."
        ),
        suggestions=fp32_gemm_advice(ctx),
    )


def misaligned_model(inp: Inputs) -> float | None:
    if inp["misaligned_gemms_per_step"] <= 0:
        return None
    return misaligned_lost_ms(inp["misaligned_gemm_device_ms"] or 0.0, _misaligned_achieved(inp, inp.peaks))


def misaligned_report(ctx: Context, lost_ms: float) -> Report:
    values = {name: ctx.value(name) for name in MISALIGNED_INPUTS}
    achieved = _misaligned_achieved(values, ctx.peaks)
    extra = (
        []
        if achieved is None
        else [Evidence("their share of the attainable roofline", achieved, "%", ESTIMATED)]
    )
    return Report(
        title="FP16/BF16 matmul dimensions are not multiples of 8",
        pairs=[
            ("misaligned GEMM calls per step", "misaligned_gemms_per_step"),
            ("their GPU time", "misaligned_gemm_device_ms"),
            ("examples", "misaligned_gemm_shapes"),
        ],
        extra=extra,
        assumes=None
        if achieved is not None
        else (
            "the ~2x slowdown of misaligned shapes in NVIDIA's matrix-multiplication guide "
            "(no FLOPs or bytes to place these calls on the roofline)"
        ),
        explanation=(
            "Tensor-core GEMM tiles need M, N and K to be multiples of 8 for 16-bit types; other shapes "
            "are padded or run on slower, narrow-alignment kernels. Time lost: the step replayed with these "
            "GEMMs at the speedup of padded shapes measured on this GPU (the calibration pass), else their "
            f"time beyond the ~{PRACTICAL_ROOFLINE_PCT:.0f}% of the roofline aligned GEMMs reach."
        ),
        suggestions=_misaligned_advice(ctx),
    )


def _misaligned_advice(ctx: Context) -> list[Suggestion]:
    condition = (
        f"{ctx.value('misaligned_gemms_per_step', 0):.0f} fp16/bf16 matmul calls a step have a dimension "
        "that is not a multiple of 8"
    )
    shapes = tuple(str(ctx.value("misaligned_gemm_shapes") or "").split("; ")[:3])
    return [
        Suggestion(
            "Pad hidden sizes, vocabulary and channel counts to a multiple of 8 (64 is better); "
            "pad the batch or sequence length likewise",
            condition,
            shapes,
        ),
        # Inductor's pad_mm pass (torch._inductor.config.shape_padding, on by default) pads a GEMM's
        # dimensions to the tensor cores' alignment where its benchmark finds the padded GEMM faster.
        *use_compile(
            ctx.config,
            why="let Inductor pad these GEMMs to aligned shapes where that is faster "
            "(torch._inductor.config.shape_padding, on by default)",
            condition=condition,
            applies_to=shapes,
        ),
    ]


def pipe_model(inp: Inputs) -> float | None:
    """The ledger's 16-bit GEMM kernels with an idle pipe (FP32 and narrow-alignment GEMMs are their own
    causes), at the pipe figure of the profiled non-FP32 GEMMs."""
    pipe = inp["ncu_non_fp32_gemm_tensor_pipe_pct"]
    gemm = inp.pool_ms or 0.0
    if (
        pipe is None
        or pipe >= LOW_TENSOR_PIPE_PCT
        or not inp.step_ms
        or 100 * gemm / inp.step_ms < GEMM_SHARE_PCT
    ):
        return None
    return pipe_idle_lost_ms(gemm, pipe)


def pipe_report(ctx: Context, lost_ms: float) -> Report:
    gemm, pipe = ctx.pools.get("tensor_pipe_idle", 0.0), ctx.value("ncu_non_fp32_gemm_tensor_pipe_pct", 0.0)
    return Report(
        title="GEMM time is high but the tensor pipe is mostly idle",
        pairs=[
            ("tensor pipe busy in the profiled non-FP32 GEMMs", "ncu_non_fp32_gemm_tensor_pipe_pct"),
            ("GEMM time per step", "gemm_time_ms"),
            ("kernel time covered by ncu", "ncu_coverage_pct"),
        ],
        extra=[
            Evidence(
                "16-bit GEMM time with an idle tensor pipe", gemm, "ms", ctx.metrics["gemm_time_ms"].source
            )
        ],
        explanation="GEMMs that are not FP32 take much of the step while the tensor pipe is busy "
        "a small fraction of their time: small or skinny matrices that cannot fill the "
        "tiles, or layouts that force narrow kernels. FP32 and misaligned GEMMs are left "
        "to their own findings.",
        suggestions=[
            Suggestion(
                "Grow matrix sizes (batch, hidden dims multiple of 64) to fill tensor-core tiles; batch "
                "many small matmuls into one (torch.bmm, grouped GEMMs)",
                f"{gemm:.3g} ms a step of non-FP32 GEMMs with the tensor pipe {pipe:.0f}% busy",
            )
        ]
        + use_compile(
            ctx.config,
            why="fuse the small matmuls and the work between them",
            condition=f"the tensor pipe is {pipe:.0f}% busy in these GEMMs",
        ),
    )


def fp32_fix(inputs: FixInputs) -> Fix | NoFix:
    found = inputs.gemm_speedup("fp32", "tf32")
    if found is None:
        return NoFix(
            "the datasheet's FP32/TF32 peak ratio; no TF32 speedup measured on this GPU: "
            + inputs.calibration_status
        )
    return Fix(
        "faster_gemms",
        "FP32 GEMMs/convolutions on TF32 tensor cores",
        {"speedup": found[0], "precisions": ("fp32",)},
        found[1],
    )


def misaligned_fix(inputs: FixInputs) -> Fix | NoFix:
    calibrated = (inputs.gemm_speedup("fp16", "fp16_aligned"), inputs.gemm_speedup("bf16", "bf16_aligned"))
    speedups = [s for s in calibrated if s]
    if not speedups:
        return NoFix(
            "the distance from the practical roofline (or the guide's ~2x); no padded-shape speedup measured "
            f"on this GPU: {inputs.calibration_status}"
        )
    speedup, basis = speedups[0]
    return Fix(
        "faster_gemms",
        "GEMM dims padded to multiples of 8",
        {"speedup": speedup, "precisions": ("fp16", "bf16")},
        basis,
    )


NOT_MEASURED = NotMeasured(
    id="tensor.not_measured",
    title="Tensor-core utilization was not measured",
    explanation="Whether GEMM kernels keep the tensor pipe busy needs ncu counters; "
    "precision here is inferred from kernel names and op dtypes.",
)
RULES = [
    Rule(
        "tensor.fp32_gemm",
        "TENSOR_CORE",
        ("gemm_fp32_ms", "step_time_ms"),
        fp32_model,
        fp32_report,
        pool=("fp32_gemm",),
        floor_pct=MIN_LOST_PCT,
        fix=fp32_fix,
        calibrated=True,
        switches=(TF32, CUDNN_BENCHMARK),
    ),
    Rule(
        "tensor.misaligned_dims",
        "TENSOR_CORE",
        ("misaligned_gemms_per_step", "step_time_ms"),
        misaligned_model,
        misaligned_report,
        optional=MISALIGNED_INPUTS,
        pool=("misaligned_gemm",),
        floor_pct=MIN_LOST_PCT,
        fix=misaligned_fix,
        calibrated=True,
        switches=(COMPILE,),
    ),
    Rule(
        "tensor.pipe_idle",
        "TENSOR_CORE",
        ("gemm_time_ms", "step_time_ms"),
        pipe_model,
        pipe_report,
        optional=("ncu_non_fp32_gemm_tensor_pipe_pct",),
        pool=("tensor_pipe_idle",),
        counters=NOT_MEASURED,
    ),
]
