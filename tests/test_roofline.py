import math
from pathlib import Path

import pytest

from hybrid.analysis.roofline import roofline
from hybrid.analysis.steps import steady_steps
from hybrid.hardware import peaks_for
from hybrid.load.ncu_match import attach_counters
from hybrid.load.nsys_export import load_nsys_export
from hybrid.load.torch_trace import load_torch_trace
from hybrid.provenance import ESTIMATED
from nsight.ncu_csv import read_ncu_csv

FIXTURES = Path(__file__).parent / "fixtures" / "h200-probe"


def test_fp16_gemm_from_torch_ops_is_compute_bound_near_the_tensor_peak():
    profile = load_torch_trace(FIXTURES / "torch_trace.json")
    peaks = peaks_for(profile.device)
    roof = roofline(profile, peaks)
    mm = next(p for p in roof["kernels"] if p["name"] == "aten::mm")
    # 2*4096^3 FLOPs over A + B + C of 4096^2 halves each
    assert mm["ai"] == pytest.approx(2 * 4096**3 / (3 * 4096**2 * 2))
    assert mm["bound"] == "compute" and mm["precision"] == "fp16" and mm["source"] == ESTIMATED
    # 3 calls of ~178 us: 137 GFLOP each, ~770 TFLOP/s, i.e. ~78% of the 989 TFLOP/s dense fp16 peak
    assert 70 < mm["achieved_pct_of_attainable"] < 85
    assert mm["ceiling_flops_per_s"] == peaks.flops("fp16") and mm["precision_source"] == "op dtype"
    # The step's ceiling: its FLOPs over the time its points need one after another, each at its own
    # ceiling; only the mm calls hold FLOPs, so that is the fp16 peak however long the other ops ran.
    points = [p for p in roof["kernels"] if sum(p["flops_by_precision"].values()) > 0]
    need_s = sum(sum(p["flops_by_precision"].values()) / p["ceiling_flops_per_s"] for p in points)
    assert roof["ceiling_flops_per_s"] == pytest.approx(
        sum(sum(p["flops_by_precision"].values()) for p in points) / need_s
    )
    assert roof["ceiling_flops_per_s"] == pytest.approx(peaks.flops("fp16"))
    assert roof["precision_mix_pct"] == {"fp16": 100.0} and "one after another" in roof["ceiling_method"]
    assert roof["ridge_point"] == pytest.approx(roof["ceiling_flops_per_s"] / peaks.dram)
    assert roof["bound"] == "compute" and roof["source"] == ESTIMATED


def test_nsys_only_places_nothing_and_says_why():
    profile = load_nsys_export(FIXTURES / "nsys_matmul_copy.sqlite")
    roof = roofline(profile, peaks_for(profile.device))
    assert roof["bound"] is None and roof["kernels"] == []
    assert "FLOP" in roof["reason"]


def test_counters_without_flop_metrics_are_not_placed_at_zero_intensity():
    # The probe's ncu run collected DRAM bytes and tensor-pipe activity but no FLOP counts.
    profile = attach_counters(
        load_nsys_export(FIXTURES / "nsys_matmul_copy.sqlite"),
        read_ncu_csv(FIXTURES / "ncu_metrics_stdout.csv"),
    )
    assert not profile.counters.empty
    roof = roofline(profile, peaks_for(profile.device))
    assert roof["kernels"] == [] and roof["bound"] is None


RESNET50 = Path(__file__).parent / "fixtures" / "runs" / "h200-resnet50"


@pytest.fixture(scope="module")
def resnet50():
    from hybrid.pipeline import analyze_run_dir

    return analyze_run_dir(RESNET50)


def test_step_time_ms_is_the_kernel_time_per_step_the_counters_cover(resnet50):
    # resnet50 b32 on the H200, ncu on a few kernel names: the step point covers only the launches
    # matched to a profiled kernel, so its time is that share of the step's kernel time (no step is an
    # outlier here, so both figures average the same steps).
    roof, metrics = resnet50["roofline"], resnet50["metrics"]
    assert resnet50["timing"]["steps_excluded"] == 0 and roof["source"] == "measured:ncu"
    covered_ms = metrics["kernel_time_ms"]["value"] * metrics["ncu_coverage_pct"]["value"] / 100
    assert roof["time_ms"] == pytest.approx(covered_ms, rel=1e-3)  # coverage is stored rounded to 0.01%
    # Per step, not the ncu replay of one launch per profiled kernel (4.2 ms before: 31 launches of 41 ms).
    assert roof["time_ms"] > 0.2 * metrics["kernel_time_ms"]["value"]
    points = roof["kernels"]  # the largest MAX_POINTS of them, by time per step
    assert sum(p["time_ms"] for p in points) <= roof["time_ms"] + 1e-9
    assert [p["time_ms"] for p in points] == sorted((p["time_ms"] for p in points), reverse=True)
    # Each point stands for whole launches per step.
    assert all(p["calls_per_step"] >= 1 and float(p["calls_per_step"] * 5).is_integer() for p in points)


def test_coverage_metric_and_warning_quote_one_computation(resnet50):
    coverage = resnet50["metrics"]["ncu_coverage_pct"]["value"]
    warning = next(w for w in resnet50["warnings"] if w.startswith("ncu counters cover only"))
    assert f"{coverage:.1f}%" in warning


def test_op_points_time_is_the_device_time_per_step_of_their_ops():
    profile = load_torch_trace(FIXTURES / "torch_trace.json")
    roof = roofline(profile, peaks_for(profile.device))
    ops = profile.ops[profile.ops["device_ns"] > 0]
    n = max(profile.measured_steps, 1)
    assert roof["time_ms"] == pytest.approx(ops["device_ns"].sum() / n / 1e6)


def test_layer_points_sum_the_counters_of_each_layers_profiled_launches(resnet50):
    # Independent aggregation: walk every kernel launch of the measured steps; a launch inside a module
    # range that ncu_pass matched to a profiled kernel (by launch or launch configuration) adds that
    # kernel's FLOPs and DRAM bytes once, and its timeline time.
    from hybrid.profile import MATCH_CONFIG, MATCH_LAUNCH
    from hybrid.rundir import RunDir
    from nsight.ncu_csv import parse_ncu_csv

    run = RunDir.open(RESNET50)
    profile = attach_counters(load_nsys_export(run.nsys_export()), parse_ncu_csv(run.ncu_csv()))
    assert resnet50["timing"]["steps_excluded"] == 0  # so every measured step counts
    steps = len(profile.steps)
    matches = profile.kernel_counters
    counters = profile.counters
    expected: dict[str, dict[str, float]] = {}
    for i, kernel in enumerate(profile.kernels.itertuples(index=False)):
        row, match = matches["counter_row"][i], matches["counter_match"][i]
        if not isinstance(kernel.layer, str) or kernel.step < 0 or match not in (MATCH_LAUNCH, MATCH_CONFIG):
            continue
        c = counters.loc[row]
        if math.isnan(c["tensor_flops"]) or math.isnan(c["dram_read_bytes"]):  # not placed without them
            continue
        acc = expected.setdefault(kernel.layer, {"flops": 0.0, "bytes": 0.0, "ns": 0.0, "rate_ns": 0.0})
        acc["flops"] += sum(
            0.0 if math.isnan(v) else float(v)
            for v in (c["tensor_flops"], c["fp64_flops"], c["fp32_flops"], c["fp16_flops"])
        )
        acc["bytes"] += float(c["dram_read_bytes"]) + (
            0.0 if math.isnan(c["dram_write_bytes"]) else float(c["dram_write_bytes"])
        )
        acc["ns"] += kernel.end_ns - kernel.start_ns
        acc["rate_ns"] += float(c["duration_ns"])

    layers = resnet50["roofline"]["layers"]
    assert len(layers) == 30 and "layers_reason" not in resnet50["roofline"]
    # the 30 layers with the most profiled kernel time, largest first
    longest = sorted(expected, key=lambda name: -expected[name]["ns"])[:30]
    assert [p["name"] for p in layers] == longest
    for point in layers:
        acc = expected[point["name"]]
        assert point["source"] == "measured:ncu"
        assert point["time_ms"] == pytest.approx(acc["ns"] / steps / 1e6)
        assert point["ai"] == pytest.approx(acc["flops"] / acc["bytes"])
        assert point["flops_per_s"] == pytest.approx(acc["flops"] / (acc["rate_ns"] / 1e9))
        assert point["bytes_per_s"] == pytest.approx(acc["bytes"] / (acc["rate_ns"] / 1e9))
        assert 0 < point["covered_pct"] <= 100
    # Layers hold a subset of the launches the step point covers.
    assert sum(p["time_ms"] for p in layers) <= resnet50["roofline"]["time_ms"]


def test_no_layer_points_without_counters_and_the_block_says_why():
    torch_only = roofline(
        load_torch_trace(FIXTURES / "torch_trace.json"),
        peaks_for(load_torch_trace(FIXTURES / "torch_trace.json").device),
    )
    assert torch_only["layers"] == [] and "ncu counters" in torch_only["layers_reason"]
    nsys_only = load_nsys_export(FIXTURES / "nsys_matmul_copy.sqlite")
    roof = roofline(nsys_only, peaks_for(nsys_only.device))
    assert roof["layers"] == [] and roof["layers_reason"]


RESNET50_DEFAULT = Path(__file__).parent / "fixtures" / "runs" / "h200-resnet50-default"


def test_precision_mix_is_by_flops_and_the_ceiling_what_the_mix_reaches(analyzed_copy):
    """resnet50 at torch's defaults (TF32 convolutions, FP32 elsewhere): by kernel time the step looked
    "fp32 88%, tf32 12%"; by FLOPs it is mostly TF32, and its ceiling is near the TF32 peak, not an
    average of ceilings weighted by how long the FP32 kernels ran."""
    results = analyzed_copy(RESNET50_DEFAULT)
    roof = results["roofline"]
    peaks = results["device"]["peaks"]["flops_per_s"]
    mix, by_time = roof["precision_mix_pct"], roof["precision_time_pct"]
    assert by_time["fp32"] > 80 and mix["tf32"] > 90 and roof["precision"] == "tf32"
    assert sum(mix.values()) == pytest.approx(100, abs=0.05)
    tf32, fp32 = peaks["tf32"]["value"], peaks["fp32"]["value"]
    # Sequential kernels at their own ceilings: between the two peaks, and pulled towards TF32 by its FLOPs.
    assert fp32 < roof["ceiling_flops_per_s"] <= tf32
    share = mix["tf32"] / 100
    assert roof["ceiling_flops_per_s"] >= 1 / (share / tf32 + (1 - share) / fp32) * 0.9
    assert roof["ridge_point"] == pytest.approx(
        roof["ceiling_flops_per_s"] / results["device"]["peaks"]["dram_bytes_per_s"]["value"]
    )
    assert roof["ceiling_method"].startswith("the step's FLOPs (tf32 ")


def test_convolutions_are_placed_with_the_flops_of_the_op_torch_counted():
    # A ResNet-style training step on the H200 (planted data_loader_workers0): torch counts FLOPs on
    # aten::conv2d, which runs no kernel; cudnn_convolution under it and convolution_backward run them.
    profile = load_torch_trace(
        Path(__file__).parent / "fixtures/planted/data_loader_workers0/run/torch/trace.json.gz"
    )
    roof = roofline(profile, peaks_for(profile.device))
    ops = profile.ops[profile.ops["device_ns"] > 0]
    # Every op that ran kernels is placed: the convolutions are no longer left out.
    assert roof["time_ms"] == pytest.approx(ops["device_ns"].sum() / max(profile.measured_steps, 1) / 1e6)
    convs = [
        p for p in roof["kernels"] if p["name"] in ("aten::cudnn_convolution", "aten::convolution_backward")
    ]
    assert convs and all(p["flops_per_s"] > 0 for p in convs)
    # fp32 convolutions ran TF32 kernels (cuDNN's TF32 flag is on by default): the TF32 roof, not FP32's.
    assert {p["precision"] for p in convs} == {"tf32"}
    assert roof["precision_mix_pct"] == {"tf32": 100.0}
    # The forward's FLOPs are torch's own count on aten::conv2d, moved to the op that ran the kernels.
    steps = steady_steps(profile)
    in_steps = profile.ops[profile.ops["step"].isin(steps["step"])]
    forward = sum(
        sum(p["flops_by_precision"].values()) for p in convs if p["name"] == "aten::cudnn_convolution"
    )
    counted = in_steps.loc[in_steps["name"] == "aten::conv2d", "flops"].sum() / len(steps)
    assert forward == pytest.approx(counted)
