"""Kernel kinds and precisions (hybrid.analysis.kernel_classes) on every kernel name of the committed H200
captures, the
measured precision against the name, and compute ceilings from a FLOP mix."""

from __future__ import annotations

import csv
import gzip
import json
import re
import sqlite3
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
from reviewed_kernels import reviewed_kernels

from hybrid.analysis.kernel_classes import (
    FROM_NAME,
    MATMUL_KINDS,
    classify_kernels,
    compute_ceiling,
    kernel_kind,
    name_precision,
)
from hybrid.analysis.roofline import CEILING_TOLERANCE, roofline
from hybrid.hardware import peaks_for
from hybrid.load.ncu_match import attach_counters
from hybrid.load.nsys_export import load_nsys_export
from hybrid.profile import DeviceInfo
from nsight.ncu_csv import parse_ncu_csv

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
H200 = peaks_for(DeviceInfo(name="NVIDIA H200"))
# Kernel events in a torch.profiler Chrome trace: read with a regex, as parsing 25 traces of up to 80 MB
# as JSON would take most of this test's time.
TRACE_KERNEL = re.compile(rb'"cat": ?"kernel", ?"name": ?"((?:[^"\\]|\\.)*)"')


@cache
def fixture_kernel_names() -> frozenset[str]:
    """Every kernel name in the committed captures: nsys exports, ncu CSVs, torch traces, results
    documents."""
    names: set[str] = set()
    for export in FIXTURES.rglob("*.sqlite"):
        with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as conn:
            names |= {
                row[0]
                for row in conn.execute(
                    "SELECT value FROM StringIds WHERE id IN "
                    "(SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)"
                )
            }
    for export in FIXTURES.rglob("*.sqlite.gz"):
        # Read the string table the same way from a decompressed copy in memory.
        conn = sqlite3.connect(":memory:")
        conn.deserialize(gzip.decompress(export.read_bytes()))
        names |= {
            row[0]
            for row in conn.execute(
                "SELECT value FROM StringIds WHERE id IN "
                "(SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)"
            )
        }
        conn.close()
    for counters in FIXTURES.rglob("counters.csv"):
        lines = [line for line in counters.read_text().splitlines() if not line.startswith("==")]
        names |= {row["Kernel Name"] for row in csv.DictReader(lines) if row.get("Kernel Name")}
    for trace in [
        *FIXTURES.rglob("trace.json.gz"),
        *FIXTURES.rglob("trace.json"),
        *FIXTURES.rglob("torch_trace.json"),
    ]:
        raw = gzip.decompress(trace.read_bytes()) if trace.suffix == ".gz" else trace.read_bytes()
        names |= {json.loads(b'"' + match + b'"') for match in TRACE_KERNEL.findall(raw)}
    for doc in [
        *(REPO / "examples").rglob("results.json"),
        *(FIXTURES / "results").glob("*.json"),
        *(FIXTURES / "seed-commands").glob("*/results.json"),
    ]:
        results = json.loads(doc.read_text())
        names |= {
            k["name"]
            for k in results.get("top_kernels", []) + (results.get("roofline") or {}).get("kernels", [])
            if not str(k["name"]).startswith("aten::")
        }
    return frozenset(names)


def test_every_kernel_name_in_the_fixtures_has_its_reviewed_class():
    reviewed, names = reviewed_kernels(), fixture_kernel_names()
    assert len(names) > 400
    assert names == set(reviewed), "regenerate tests/fixtures/kernel_classes.tsv and review the new names"
    wrong = {
        name: ((kernel_kind(name), name_precision(name)), expected)
        for name, expected in reviewed.items()
        if (kernel_kind(name), name_precision(name)) != expected
    }
    assert not wrong


@pytest.mark.parametrize(
    ("name", "kind", "precision"),
    [
        # The resnet50 with TF32 on: cuDNN batch norm matched "cudnn" and "float" and was an FP32
        # GEMM.
        (
            (
                "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>"
                "(cudnnTensorStruct, float const*)"
            ),
            "normalization",
            "fp32",
        ),
        (
            "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float)",
            "normalization",
            "fp32",
        ),
        (
            (
                "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_"
                "segment_k_off_kernel__5x_cudnn"
            ),
            "conv",
            "tf32",
        ),
        (
            (
                "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel_"
                "_5x_cublas"
            ),
            "gemm",
            "fp32",
        ),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_256x128_16x3_nn_align1>(T1::Params)",
            "gemm",
            "tf32",
        ),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(T1::Params)", "gemm", "fp32"),
        ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "gemm", "bf16"),
        ("nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm", "fp16"),
        (
            (
                "void at::native::<unnamed>::softmax_warp_forward<float, float, float, "
                "(int)7, (bool)1, (bool)0>(T2 *, int)"
            ),
            "softmax",
            "fp32",
        ),
        (
            "void at::native::<unnamed>::max_pool_forward_nhwc<c10::BFloat16, int>(const T1 *, int)",
            "pooling",
            "bf16",
        ),
        (
            (
                "void at::native::reduce_kernel<(int)512, (int)1, "
                "at::native::ReduceOp<float, at::native::MeanOps<float>>>(T3)"
            ),
            "reduction",
            "fp32",
        ),
        (
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false>(float*)",
            "reduction",
            "fp32",
        ),
        (
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
                "(int, T2, T3)"
            ),
            "elementwise",
            "fp32",
        ),
        ("triton_poi_fused_add_0", "elementwise", None),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", None),
    ],
)
def test_name_classifier(name, kind, precision):
    assert (kernel_kind(name), name_precision(name)) == (kind, precision)


@cache
def measured_classes() -> dict[str, pd.DataFrame]:
    """Per capture with ncu counters: the classes of its profiled kernels (ncu's own names), measured."""
    out = {}
    for counters_csv in FIXTURES.rglob("counters.csv"):
        counters = parse_ncu_csv(counters_csv).frame
        if counters["tensor_flops"].notna().any():
            out[str(counters_csv.relative_to(FIXTURES))] = classify_kernels(counters["name"], counters, H200)
    return out


def test_ncu_measures_the_precision_every_profiled_gemm_names():
    """Wherever a GEMM, convolution or attention kernel names its precision, its FLOP counters agree (40
    profiled matmul kernels over 20 captures; nvjet's `tst` code is the one the counters corrected: bf16)."""
    checked = 0
    for capture, classes in measured_classes().items():
        matmul = classes[classes["kind"].isin(MATMUL_KINDS) & (classes["precision_source"] == "measured:ncu")]
        for name, row in matmul.iterrows():
            stated = name_precision(name)
            if stated is not None:
                checked += 1
                assert row["precision"] == stated, (capture, name)
                assert row["tensor_core"] is (stated != "fp32"), (capture, name)
    assert checked >= 30


def test_a_kernel_without_measured_flops_keeps_its_name_class():
    classes = next(iter(measured_classes().values()))
    unmeasured = classify_kernels(
        pd.Series(["sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64"]), None, H200
    )
    assert unmeasured["precision_source"].tolist() == [FROM_NAME] and unmeasured["precision"].tolist() == [
        "tf32"
    ]
    assert set(classes["precision_source"]) <= {"measured:ncu", FROM_NAME}


def test_ceiling_of_one_precision_is_its_peak_and_a_mix_meets_each_unit_at_its_peak():
    assert compute_ceiling({"tensor:bf16": 1e12}, H200) == pytest.approx(H200.flops("bf16"))
    assert compute_ceiling({"fp32": 1e9}, H200) == pytest.approx(H200.flops("fp32"))
    # A TF32 conv with a small fp32 epilogue: tensor cores and FMA units run side by side.
    mix = {"tensor:tf32": 1e12, "fp32": 1e9}
    assert compute_ceiling(mix, H200) == pytest.approx((1e12 + 1e9) / (1e12 / H200.flops("tf32")))
    # fp32 and scalar fp16 share the FMA units: their times add.
    shared = {"fp32": 1e9, "fp16": 1e9}
    assert compute_ceiling(shared, H200) == pytest.approx(
        2e9 / (1e9 / H200.flops("fp32") + 1e9 / H200.flops("fp16_scalar"))
    )
    assert compute_ceiling({"tensor:fp8": 1.0}, peaks_for(DeviceInfo(name="NVIDIA A100-SXM4-80GB"))) is None


# Captures with counters outside the planted suite (tests/test_planted_fixtures.py checks those).
COUNTER_CAPTURES = [
    p.parent.parent
    for p in FIXTURES.rglob("counters.csv")
    if "planted" not in p.parts and (p.parent.parent / "nsys").is_dir()
]


@pytest.mark.parametrize("capture", COUNTER_CAPTURES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_no_measured_roofline_point_lies_above_its_ceiling(capture):
    export = next(p for p in (capture / "nsys").iterdir() if p.name.startswith("profile.sqlite"))
    if export.suffix == ".gz":
        pytest.skip("compressed export: re-analyzed by its own test")
    profile = attach_counters(load_nsys_export(export), parse_ncu_csv(capture / "ncu" / "counters.csv"))
    roof = roofline(profile, peaks_for(profile.device))
    assert roof["above_ceiling"] == []
    points = roof["kernels"] + roof["layers"]
    assert points
    for point in points:
        assert point["precision_source"] in ("measured:ncu", None)
        if point["flops_per_s"] and point["ceiling_flops_per_s"]:
            assert point["flops_per_s"] <= point["ceiling_flops_per_s"] * (1 + CEILING_TOLERANCE)


@cache
def _analyzed(name: str) -> dict:
    from hybrid.pipeline import analyze_run_dir

    return analyze_run_dir(FIXTURES / "precision" / name / "run")


def test_resnet50_with_tf32_on_has_no_fp32_gemm_finding():
    """The issue's resnet50 with TF32 on: its cuDNN batch norm kernels were counted as FP32 GEMMs and TF32 was
    advised although on. Measured now: every GEMM/conv kernel is TF32, batch norm is normalization."""
    doc = _analyzed("resnet50_tf32")
    m = doc["metrics"]
    assert m["gemm_fp32_ms"]["value"] == 0 and m["gemm_tf32_ms"]["value"] > 5
    assert m["gemm_tf32_conv_ms"]["value"] > 0 and m["gemm_tf32_matmul_ms"]["value"] > 0
    assert "tensor.fp32_gemm" not in {f["id"] for f in doc["diagnosis"]["bottlenecks"]}
    assert not any(
        "allow_tf32 = True" in s for f in doc["diagnosis"]["bottlenecks"] for s in f["suggestions"]
    )


def test_vit_in_bf16_autocast_is_placed_under_its_bf16_mix():
    """timm ViT-S/16, bf16 autocast: was "228% of 67 TFLOP/s fp32"; ncu measured bf16 tensor work in its
    GEMMs and its attention (cuDNN's `..._f16_...` SDPA kernels), so the step's ceiling is the mix's, far
    above fp32."""
    doc = _analyzed("vit_train_bf16")
    roof, peaks = doc["roofline"], doc["device"]["peaks"]["flops_per_s"]
    assert roof["precision_mix_pct"]["bf16"] > 20
    assert roof["ceiling_flops_per_s"] > 3 * peaks["fp32"]["value"]
    assert roof["flops_per_s"] <= roof["ceiling_flops_per_s"] and roof["achieved_pct_of_attainable"] <= 100
    sdpa = [k for k in roof["kernels"] if "sdpa" in k["name"]]
    assert sdpa and all(k["precision"] == "bf16" and k["precision_source"] == "measured:ncu" for k in sdpa)
    assert doc["metrics"]["gemm_bf16_ms"]["value"] > 0.9 * doc["metrics"]["gemm_time_ms"]["value"]


def test_native_depthwise_convolutions_are_no_tensor_core_work():
    """The torchvision detector's MobileNet backbone (H200 capture, TF32 allowed for cuDNN): PyTorch's
    conv_depthwise2d kernels ran on CUDA cores and took 32% of the time its FP32 finding said TF32 would speed
    up; no precision flag moves them to tensor cores. They are no matmul kind, and the finding keeps cuBLAS's
    FP32 GEMMs (2.39 ms a step), which TF32 does move."""
    from hybrid.pipeline import analyze_run_dir

    names = pd.Series(["void conv_depthwise2d_forward_kernel<1, float, int>(...)"])
    assert classify_kernels(names)["kind"].iloc[0] == "other"
    run = Path(__file__).parent / "fixtures" / "unmarked_runs" / "torchvision_detection_eval" / "run"
    metrics = {k: m["value"] for k, m in analyze_run_dir(run)["metrics"].items()}
    assert "conv_depthwise" not in metrics["gemm_fp32_kernels"]
    assert metrics["gemm_fp32_conv_ms"] < 0.2
    assert 2.3 < metrics["gemm_fp32_matmul_ms"] < 2.5


def test_one_block_grids_are_the_kernels_own_serial_work_not_idle_sms_a_batch_would_fill():
    """The torchvision detector (H200): 68% of its kernels' time on grids smaller than the GPU was in grids of
    one block, torchvision nms's gather_keep_from_mask<<<1, 47>>> first, then CUB's single-tile passes. The
    small-grid finding ranked first (SEVERE), claiming a full grid would run them 132x faster and advising a
    larger batch, which leaves nms's one block as it is. The rest of the small grids hold 12% of kernel time,
    under the finding's 20%, and no small-grid finding is left."""
    from hybrid.pipeline import analyze_run_dir

    run = Path(__file__).parent / "fixtures" / "unmarked_runs" / "torchvision_detection_eval" / "run"
    results = analyze_run_dir(run)
    metrics = {k: m["value"] for k, m in results["metrics"].items()}
    assert 10 < metrics["small_grid_time_pct"] < 20
    ids = [f["id"] for f in results["diagnosis"]["bottlenecks"]]
    assert "occupancy.small_grid" not in ids
