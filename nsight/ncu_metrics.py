"""The minimal Nsight Compute metric set a diagnosis needs, and the counter columns its values become
(counter_columns; hybrid.profile.COUNTER_COLUMNS is the same set of names, typed).

Kept small on purpose: every hardware counter metric costs replay passes (the kernel is re-run once
per pass with its memory saved and restored), and `--set full` needs dozens per kernel. Launch
metrics (`launch__*`) and the theoretical occupancy are computed from the launch configuration and
cost no pass. What each metric measured on an H200, and its traps, is in
/work/shared/reference/hopper-metrics.md; every name here exists in `ncu --query-metrics --chip gh100`
(checked by tests/test_ncu_metrics.py against a verbatim excerpt in tests/fixtures/ncu/).

Torch-free and pandas-free: values arrive already converted to base units (bytes, ns, Hz, %, counts).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

# Kernel time as the GPU saw it. With `--clock-control none` it is comparable with nsys durations
# (ncu otherwise locks clocks to base and every kernel looks slower than in production).
DURATION = "gpu__time_duration.sum"

# DRAM traffic. Trap: writes still resident in L2 when the kernel ends are not counted (a 64 MB
# write read as 42.8 MB on the H200), so write bytes are a lower bound for write-heavy kernels.
DRAM_READ_BYTES = "dram__bytes_read.sum"
DRAM_WRITE_BYTES = "dram__bytes_write.sum"

# L2 traffic requested by the SMs (the L2 roofline ceiling) and the L2 sector hit rate. Trap: the hit
# rate can read slightly above 100 (100.07 and 100.26 seen), so it is clamped.
L2_BYTES = "lts__t_bytes.sum"
L2_HIT_RATE = "lts__t_sector_hit_rate.pct"
L1_HIT_RATE = "l1tex__t_sector_hit_rate.pct"

# Scalar (non-tensor) FLOPs from executed SASS thread instructions: add + mul + 2*fma per precision
# (fp16 only in kernels named with a 16-bit type, SIXTEEN_BIT_FLOAT_KERNEL).
# Trap: PyTorch's fp16 elementwise math mostly runs as fp32 FFMA/FMUL, so fp16 kernels show fp32
# FLOPs. Nsight Compute's own half-precision roofline uses the same add + mul + 2*fma formula.
SCALAR_FLOP_OPS = {
    "fp64": (
        "sm__sass_thread_inst_executed_op_dadd_pred_on.sum",
        "sm__sass_thread_inst_executed_op_dmul_pred_on.sum",
        "sm__sass_thread_inst_executed_op_dfma_pred_on.sum",
    ),
    "fp32": (
        "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
        "sm__sass_thread_inst_executed_op_fmul_pred_on.sum",
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    ),
    "fp16": (
        "sm__sass_thread_inst_executed_op_hadd_pred_on.sum",
        "sm__sass_thread_inst_executed_op_hmul_pred_on.sum",
        "sm__sass_thread_inst_executed_op_hfma_pred_on.sum",
    ),
}

# Kernels whose name shows a 16-bit floating type: only their HADD/HMUL/HFMA count as fp16 scalar
# FLOPs; any other kernel gets 0. Trap: NVCC emits `HFMA2.MMA Rd, -RZ, RZ, imm, imm` (and HFMA2 with RZ
# operands) to move a register or build a constant in plain float kernels, so the fp16 counters fire
# with no 16-bit math at all. Measured: in tests/fixtures/unmarked_runs/pyg_gcn_train (fp32, no autocast)
# `indexFuncLargeIndex<float, ...>` executed 17.6M HFMA beside 8.8M fp32 FLOPs (80% of its FLOPs read
# as fp16, the run as "mixed precision"); in precision/vit_train_bf16 `CUDAFunctor_add<float>` 4.8M
# HFMA beside 9.7M fp32 FLOPs; in runs/h200-resnet50-50steps cuDNN's
# `sm80_xmma_wgrad_implicit_gemm_indexed_f32f32_..._ffma` 38.8M HFMA a launch; in
# benchmarks/results/ncu_accuracy_h200/copy.csv a float copy 268M HFMA and no FLOP.
# Spellings: PyTorch `c10::Half`/`c10::BFloat16`, CUDA `__half`/`__nv_bfloat16`, CUTLASS
# `half_t`/`bfloat16_t`, `float16_copy_kernel`/`bfloat16_copy_kernel`, cuDNN/cuBLAS/CUTLASS
# `f16`/`bf16`/`fp16` (`bf16bf16_bf16f32`, `tensorop_f16_s16816gemm_f16`, `cudnn_generated_..._f16_`),
# legacy cuBLAS/cuDNN `h884gemm`/`h1688gemm`/`h16816gemm`/`h884cudnn`/`hgemm`, and nvjet's type code
# with `h` (fp16) or `t` (bf16): `nvjet_sm90_hsh_`, `nvjet_sm90_tst_`. Not `_h_`: nvjet has it in fp32
# kernels too (`1x2_h_bz`). Triton kernels name no type and get 0 (Inductor computes 16-bit data in fp32).
SIXTEEN_BIT_FLOAT_KERNEL = re.compile(
    r"float16|f16|half|h\d{3,6}(?:gemm|cudnn)|hgemm|nvjet_sm\d+_[a-z]*[ht][a-z]*_",
    re.IGNORECASE,
)

# Tensor-core math ops by source precision; one op is one multiply or one add, so the count is
# FLOPs (checked: exactly 2*4096^3 for a bf16 GEMM, 2*1024^3 for an fp64 GEMM). Trap: the
# `sm__ops_path_tensor_op_hmma_src_*` variants count only mma.sync and miss Hopper's wgmma, which is
# what cuBLAS/nvjet GEMMs use on sm_90. Integer (int8/int1) tensor ops are not FLOPs and are left out.
TENSOR_OPS_BY_PRECISION = {
    "bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "fp16": "sm__ops_path_tensor_src_fp16.sum",
    "tf32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "fp8": "sm__ops_path_tensor_src_fp8.sum",
    "fp64": "sm__ops_path_tensor_src_fp64.sum",
}

# Tensor pipe busy for the MMA/GMMA instruction families only. Trap: the broader
# `sm__pipe_tensor_cycles_active` also counts HFMA2.MMA and DMMA (1.3% in PyTorch's random-number
# kernels), so "tensor pipe > 0" alone would not mean a tensor-core GEMM ran.
TENSOR_PIPE = "sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active"

# Speed-of-light: the busiest SM unit and the busiest memory unit, % of peak over the kernel.
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_THROUGHPUT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"

# Achieved vs theoretical occupancy. Trap: wgmma GEMMs run at ~15% occupancy with the tensor pipe
# 95% busy, so low occupancy alone is no bottleneck signal; rules must look at the pipes too.
ACHIEVED_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL_OCCUPANCY = "sm__maximum_warps_per_active_cycle_pct"

# Blocks per SM each resource allows (launch metrics, no replay); the smallest one is the limiter.
# Keys are the `occupancy_limiter` values of the counter frame. "blocks" hits when blocks are so
# small that the per-SM block limit binds before warps do, hence "block_size"; "warps" when
# blocks are large.
OCCUPANCY_LIMITS = {
    "registers": "launch__occupancy_limit_registers",
    "shared_memory": "launch__occupancy_limit_shared_mem",
    "block_size": "launch__occupancy_limit_blocks",
    "warps": "launch__occupancy_limit_warps",
}
# Theoretical occupancy at or above this (percent) means no resource limits it.
FULL_OCCUPANCY_PCT = 100.0

# Coalescing of global loads: sectors per request, 4 being ideal for 4-byte loads by a full warp.
GLOBAL_LOAD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
GLOBAL_LOAD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"

# SM clock during the kernel (clocks are not locked): 1.62 GHz in a GEMM, ~1.95 GHz elementwise.
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"

# Everything requested from ncu, in one --metrics list.
METRICS: tuple[str, ...] = (
    DURATION,
    DRAM_READ_BYTES,
    DRAM_WRITE_BYTES,
    L2_BYTES,
    L2_HIT_RATE,
    L1_HIT_RATE,
    *(name for ops in SCALAR_FLOP_OPS.values() for name in ops),
    *TENSOR_OPS_BY_PRECISION.values(),
    TENSOR_PIPE,
    SM_THROUGHPUT,
    MEMORY_THROUGHPUT,
    ACHIEVED_OCCUPANCY,
    THEORETICAL_OCCUPANCY,
    *OCCUPANCY_LIMITS.values(),
    GLOBAL_LOAD_SECTORS,
    GLOBAL_LOAD_REQUESTS,
    SM_CLOCK,
)

# Metrics that map one-to-one onto a counter column.
DIRECT_COLUMNS = {
    "duration_ns": DURATION,
    "dram_read_bytes": DRAM_READ_BYTES,
    "dram_write_bytes": DRAM_WRITE_BYTES,
    "l2_bytes": L2_BYTES,
    "l1_hit_pct": L1_HIT_RATE,
    "tensor_pipe_pct": TENSOR_PIPE,
    "sm_throughput_pct": SM_THROUGHPUT,
    "memory_throughput_pct": MEMORY_THROUGHPUT,
    "achieved_occupancy_pct": ACHIEVED_OCCUPANCY,
    "theoretical_occupancy_pct": THEORETICAL_OCCUPANCY,
    "sm_clock_hz": SM_CLOCK,
}

NAN = float("nan")


def _scalar_flops(values: Mapping[str, float], precision: str, kernel_name: str) -> float:
    add, mul, fma = (values.get(name, NAN) for name in SCALAR_FLOP_OPS[precision])
    flops = add + mul + 2.0 * fma
    if precision == "fp16" and not math.isnan(flops) and not SIXTEEN_BIT_FLOAT_KERNEL.search(kernel_name):
        return 0.0  # HFMA2 as register moves, not math (SIXTEEN_BIT_FLOAT_KERNEL)
    return flops


def _tensor_flops(values: Mapping[str, float]) -> tuple[float, dict[str, float]]:
    by_precision = {p: values.get(name, NAN) for p, name in TENSOR_OPS_BY_PRECISION.items()}
    measured = [v for v in by_precision.values() if not math.isnan(v)]
    # The total is NaN only when no precision was measured; a precision ncu lacks adds nothing.
    total = sum(measured) if measured else NAN
    return total, by_precision


def _occupancy_limiter(values: Mapping[str, float]) -> str | None:
    theoretical = values.get(THEORETICAL_OCCUPANCY, NAN)
    if math.isnan(theoretical) or theoretical >= FULL_OCCUPANCY_PCT:
        return None
    limits = {key: values.get(name, NAN) for key, name in OCCUPANCY_LIMITS.items()}
    known = {key: v for key, v in limits.items() if not math.isnan(v)}
    if not known:
        return None
    # Ties go to the first in OCCUPANCY_LIMITS order: registers and shared memory are what a kernel
    # author can change, so naming them is the more useful answer.
    return min(known, key=lambda key: known[key])


def _ratio(numerator: float, denominator: float) -> float:
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return NAN
    return numerator / denominator


def counter_columns(values: Mapping[str, float], kernel_name: str) -> dict[str, object]:
    """The counter-frame columns (all but name/grid/block) from one kernel's metric values in base
    units; `kernel_name` (ncu's, as the frame's `name`) decides whether its HFMA/HADD/HMUL count as fp16
    FLOPs. A metric absent from `values` gives NaN in the columns that need it."""
    row: dict[str, object] = {column: values.get(metric, NAN) for column, metric in DIRECT_COLUMNS.items()}
    l2_hit = values.get(L2_HIT_RATE, NAN)
    row["l2_hit_pct"] = min(l2_hit, 100.0) if not math.isnan(l2_hit) else NAN
    for precision in SCALAR_FLOP_OPS:
        row[f"{precision}_flops"] = _scalar_flops(values, precision, kernel_name)
    row["tensor_flops"], row["tensor_flops_by_precision"] = _tensor_flops(values)
    row["occupancy_limiter"] = _occupancy_limiter(values)
    row["global_load_sectors_per_request"] = _ratio(
        values.get(GLOBAL_LOAD_SECTORS, NAN), values.get(GLOBAL_LOAD_REQUESTS, NAN)
    )
    return row
