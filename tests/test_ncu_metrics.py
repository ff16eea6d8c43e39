"""The metric set: every name exists on Hopper (checked against a verbatim excerpt of
`ncu --query-metrics --chip gh100` and a real raw-page capture), and the derived columns."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from hybrid.analysis.kernel_classes import name_precision
from hybrid.profile import COUNTER_COLUMNS
from nsight import ncu_metrics as m
from nsight.ncu_csv import parse_ncu_csv

FIXTURES = Path(__file__).parent / "fixtures"
QUERY_EXCERPT = FIXTURES / "ncu" / "gh100-query-metrics-excerpt.txt"
RAW_CAPTURE = FIXTURES / "h200-probe" / "ncu_raw_page.csv"

# Rollups and ratio suffixes ncu accepts after a base counter/ratio/throughput name.
COUNTER_SUFFIXES = {".sum", ".avg.pct_of_peak_sustained_active", ".avg.per_second"}
RATIO_SUFFIXES = {".pct"}
THROUGHPUT_SUFFIXES = {".avg.pct_of_peak_sustained_elapsed"}


def query_list() -> dict[str, str]:
    """base metric name -> metric type, from the excerpt."""
    types = {}
    for line in QUERY_EXCERPT.read_text().splitlines()[4:]:
        parts = line.split()
        types[parts[0]] = parts[1]
    return types


def test_every_metric_exists_on_gh100_with_a_suffix_fitting_its_type():
    types = query_list()
    raw_header = next(csv.reader(RAW_CAPTURE.open()))
    for metric in m.METRICS:
        base, _, rest = metric.partition(".")
        if base not in types:
            # Launch-derived metrics are not in the query list; the real capture shows ncu reports them.
            assert metric in raw_header, f"{metric} is neither in the gh100 metric list nor in a capture"
            continue
        suffix = "." + rest
        allowed = {"Counter": COUNTER_SUFFIXES, "Ratio": RATIO_SUFFIXES, "Throughput": THROUGHPUT_SUFFIXES}
        assert suffix in allowed[types[base]], f"{metric}: {types[base]} metric with suffix {suffix}"


def test_no_metric_requested_twice_and_hmma_only_variants_avoided():
    assert len(set(m.METRICS)) == len(m.METRICS)
    # The hmma-only tensor op counters miss wgmma; the broad tensor pipe counts DMMA/HFMA2.MMA.
    assert not any("ops_path_tensor_op_hmma" in name for name in m.METRICS)
    assert "sm__pipe_tensor_cycles_active" not in {name.split(".")[0] for name in m.METRICS}


def test_counter_columns_cover_the_contract():
    row = m.counter_columns({}, "kernel")
    assert set(row) | {"name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"} == set(
        COUNTER_COLUMNS
    )


def test_flops_are_add_plus_mul_plus_twice_fma():
    fadd, fmul, ffma = m.SCALAR_FLOP_OPS["fp32"]
    row = m.counter_columns({fadd: 3.0, fmul: 5.0, ffma: 7.0}, "kernel")
    assert row["fp32_flops"] == 3 + 5 + 2 * 7
    assert math.isnan(row["fp64_flops"])  # not measured is not zero


def test_tensor_flops_sum_measured_precisions_only():
    row = m.counter_columns(
        {m.TENSOR_OPS_BY_PRECISION["bf16"]: 2 * 4096**3, m.TENSOR_OPS_BY_PRECISION["fp16"]: 0.0}, "kernel"
    )
    assert row["tensor_flops"] == 2 * 4096**3
    assert row["tensor_flops_by_precision"]["bf16"] == 2 * 4096**3
    assert math.isnan(row["tensor_flops_by_precision"]["tf32"])
    assert math.isnan(m.counter_columns({}, "kernel")["tensor_flops"])


def test_sectors_per_request_guards_zero_requests():
    assert (
        m.counter_columns({m.GLOBAL_LOAD_SECTORS: 40.0, m.GLOBAL_LOAD_REQUESTS: 10.0}, "kernel")[
            "global_load_sectors_per_request"
        ]
        == 4.0
    )
    assert math.isnan(
        m.counter_columns({m.GLOBAL_LOAD_SECTORS: 0.0, m.GLOBAL_LOAD_REQUESTS: 0.0}, "kernel")[
            "global_load_sectors_per_request"
        ]
    )


def test_limiter_none_at_full_theoretical_occupancy():
    limits = {name: 8.0 for name in m.OCCUPANCY_LIMITS.values()}
    assert (
        m.counter_columns({**limits, m.THEORETICAL_OCCUPANCY: 100.0}, "kernel")["occupancy_limiter"] is None
    )
    tied = {**limits, m.THEORETICAL_OCCUPANCY: 50.0}
    assert m.counter_columns(tied, "kernel")["occupancy_limiter"] == "registers"
    smem = {**tied, m.OCCUPANCY_LIMITS["shared_memory"]: 2.0}
    assert m.counter_columns(smem, "kernel")["occupancy_limiter"] == "shared_memory"


# Real raw-page captures (one row per kernel, a units row under the header).
PYG_FP32 = FIXTURES / "unmarked_runs" / "pyg_gcn_train" / "run" / "ncu" / "counters.csv"  # fp32, no autocast
VIT_BF16 = FIXTURES / "precision" / "vit_train_bf16" / "run" / "ncu" / "counters.csv"  # bf16 autocast
FP16_GEMMS = FIXTURES / "verify" / "tc_fp16_unaligned_compile" / "run" / "ncu" / "counters.csv"  # fp16


def fp16_ops_in_file(path: Path, kernel: str) -> tuple[float, float]:
    """(hadd + hmul + 2*hfma, fp32 add + mul + 2*fma) of the one kernel whose name contains `kernel`,
    read from the file with the csv module (the units row says `inst`: counts, no scaling)."""
    units, *data = csv.DictReader(path.read_text().splitlines())
    rows = [r for r in data if kernel in r["Kernel Name"]]
    assert len(rows) == 1, f"{kernel!r} is in {len(rows)} rows of {path}"
    assert {units[name] for ops in m.SCALAR_FLOP_OPS.values() for name in ops} == {"inst"}

    def ops(precision: str) -> float:
        add, mul, fma = (float(rows[0][name].replace(",", "")) for name in m.SCALAR_FLOP_OPS[precision])
        return add + mul + 2 * fma

    return ops("fp16"), ops("fp32")


def parsed_row(path: Path, kernel: str):
    frame = parse_ncu_csv(path).frame
    rows = frame[frame["name"].str.contains(kernel, regex=False)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_float_kernel_hfma_moves_are_no_fp16_flops():
    # The pyg GCN run is fp32 throughout, yet its float index_add kernel executed HFMA2 (moves):
    # counted as FLOPs they made 80% of its work fp16 and the run "mixed precision".
    kernel = "indexFuncLargeIndex<float, long"
    fp16_ops, fp32_ops = fp16_ops_in_file(PYG_FP32, kernel)
    assert fp16_ops == 2 * 17_599_808 and fp32_ops == 8_799_904
    row = parsed_row(PYG_FP32, kernel)
    assert row["fp16_flops"] == 0
    assert row["fp32_flops"] == fp32_ops  # the rest of the computation is untouched


def test_bf16_and_fp16_kernels_keep_their_fp16_scalar_flops():
    # One bf16-autocast capture holds both: the bf16 add keeps its HFMA, the float add's are moves.
    bf16_add = "gpu_kernel_impl_nocast<at::CUDAFunctor_add<c10::BFloat16>>"
    fp16_ops, _ = fp16_ops_in_file(VIT_BF16, bf16_add)
    assert fp16_ops == 2 * 14_450_688
    assert parsed_row(VIT_BF16, bf16_add)["fp16_flops"] == fp16_ops
    float_add = "gpu_kernel_impl_nocast<at::CUDAFunctor_add<float>>"
    assert fp16_ops_in_file(VIT_BF16, float_add)[0] == 2 * 4_841_472
    assert parsed_row(VIT_BF16, float_add)["fp16_flops"] == 0
    # fp16: PyTorch's c10::Half softmax and a CUTLASS f16 GEMM (its epilogue's HADD).
    for kernel in ("cunn_SoftMaxForward<8, c10::Half", "cutlass_75_tensorop_f16_s1688gemm_f16_256x128_tn"):
        fp16_ops, _ = fp16_ops_in_file(FP16_GEMMS, kernel)
        assert fp16_ops > 0
        assert parsed_row(FP16_GEMMS, kernel)["fp16_flops"] == fp16_ops


def test_unmeasured_fp16_ops_stay_nan_in_a_float_kernel():
    assert math.isnan(m.counter_columns({}, "indexFuncLargeIndex<float, long>")["fp16_flops"])


def test_every_committed_kernel_named_fp16_or_bf16_counts_its_fp16_ops():
    # The name reading of hybrid.analysis.kernel_classes and this regex agree on every 16-bit kernel
    # the committed captures hold (the regex also takes names whose 16-bit type is not the first one).
    names = {
        name for path in FIXTURES.glob("**/ncu/counters.csv") for name in parse_ncu_csv(path).frame["name"]
    }
    sixteen_bit = [n for n in names if name_precision(n) in ("fp16", "bf16")]
    assert len(sixteen_bit) > 20
    assert [n for n in sixteen_bit if not m.SIXTEEN_BIT_FLOAT_KERNEL.search(n)] == []
    # cuDNN's fp32 wgrad (runs/h200-resnet50-50steps: 38.8M HFMA a launch) is no 16-bit kernel.
    wgrad = [n for n in names if n.startswith("sm80_xmma_wgrad_implicit_gemm_indexed_f32f32_")]
    assert wgrad and not any(m.SIXTEEN_BIT_FLOAT_KERNEL.search(n) for n in wgrad)
