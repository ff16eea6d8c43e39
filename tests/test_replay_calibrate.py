"""The calibration's shapes and timings: the shapes it reads off real H200 torch traces (convolutions with
their recorded strides), the timing of a tiny shape on CPU tensors with its cache and budget, and how the
replay weighs what it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.collect import microbench
from hybrid.collect.calibrate_run import recorded_args, run_shapes
from hybrid.load.torch_trace import load_torch_trace
from hybrid.replay import calibrate as cal
from hybrid.replay.choose import calibrated_speedup, calibration_status
from hybrid.rundir import RunDir

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


def test_a_tiny_gemm_is_timed_in_each_variant_and_cached(tmp_path, monkeypatch):
    cache = tmp_path / "cache.json"
    shape = cal.Shape("mm", (16, 24, 8), "fp32")
    result = microbench.calibrate([cal.RunShape(shape, 1.0, 5.0)], device="cpu", cache=cache)
    timings = result["shapes"][0]["us"]
    assert result["shapes"][0]["run_us"] == 5.0
    assert set(timings) == {"current", "tf32", "bf16"} and all(us > 0 for us in timings.values())
    assert shape.key in json.loads(cache.read_text())[result["device"]]
    assert result["untimed"] == [] and result["timing_s"] >= 0

    def fail(*args, **kwargs):
        raise AssertionError("a cached shape was timed again")

    monkeypatch.setattr(microbench, "time_shape", fail)
    again = microbench.calibrate([cal.RunShape(shape, 1.0, 5.0)], device="cpu", cache=cache)
    assert again["shapes"][0]["us"] == timings


def test_a_spent_budget_times_nothing_and_says_so(tmp_path):
    shape = cal.Shape("mm", (16, 24, 8), "fp32")
    result = microbench.calibrate(
        [cal.RunShape(shape, 1.0, 5.0)], device="cpu", cache=tmp_path / "c.json", budget_s=0.0
    )
    assert result["shapes"] == []
    assert result["untimed"] == [
        {"key": shape.key, "share": 1.0, "why": "the 0 s timing budget was spent on larger shapes"}
    ]
    assert shape.key not in json.loads((tmp_path / "c.json").read_text())[result["device"]]


def test_padded_shapes_are_multiples_of_eight():
    import torch

    a, b = microbench._operands(torch, cal.Shape("mm", (10, 1020, 4090), "fp16"), "fp16_aligned", "cpu")
    assert tuple(a.shape) == (10 + 6, 4096) and tuple(b.shape) == (4096, 1024)
    grouped = cal.padded(cal.Shape("conv", (2, 12, 9, 9, 6, 3, 3, 3), "fp16", (1, 1, 1, 1, 1, 1, 3)))
    assert grouped.dims == (2, 24, 9, 9, 24, 8, 3, 3)  # 8 input and 8 output channels per group


def test_top_shapes_of_a_real_trace_rank_gemms_by_device_time():
    run = RunDir.open(FIXTURES / "planted" / "tc_fp16_unaligned" / "run")
    shapes = cal.top_shapes(load_torch_trace(run.torch_trace()).ops, 3)
    assert shapes[0].shape.key == "mm:8192x50257x1020:fp16"
    assert all(s.shape.dtype == "fp16" for s in shapes) and shapes[0].share > shapes[-1].share > 0
    # The run's own time per call beside the one the calibration timed on the same H200 (session 3):
    # 7.03 ms under torch.profiler, 7.53 ms timed alone.
    timed = json.loads((run.path / "calibration.json").read_text())["shapes"][0]["us"]["current"]
    assert shapes[0].run_us == pytest.approx(timed, rel=0.1)


def test_resnet50_convolutions_carry_the_strides_the_trace_recorded():
    # resnet50's stem is a 7x7 convolution with stride 2 and padding 3; its downsampling 3x3 convolutions
    # run at stride 2 (torch 2.11's profiler records them in "Concrete Inputs").
    trace = RunDir.open(FIXTURES / "runs" / "h200-resnet50").torch_trace()
    shapes = [found.shape for found in run_shapes(trace, 60)]
    by_key = {shape.key: shape for shape in shapes}
    assert by_key["conv:32x3x224x224x64x3x7x7+2x2x3x3x1x1x1:fp32"].conv == (2, 2, 3, 3, 1, 1, 1)
    strided = [s for s in shapes if s.op == "conv" and s.conv[:2] == (2, 2)]
    assert len(strided) >= 4 and all(s.conv for s in shapes if s.op == "conv")
    # One entry per GEMM/convolution call of the trace, keyed as the loader keys its operators.
    ops = load_torch_trace(trace).ops
    calls = ops[ops["name"].isin(cal.GEMM_OPS)]
    assert set(zip(calls["tid"], calls["start_ns"], strict=True)) == set(recorded_args(trace))


def test_gemms_keep_the_operand_layout_the_run_had():
    # tc_fp16_unaligned: nn.Linear's forward multiplies by the weight's transposed view ("nt"), its weight
    # gradient by the activations' ("tn"); the input gradient is row-major in both.
    trace = RunDir.open(FIXTURES / "planted" / "tc_fp16_unaligned" / "run").torch_trace()
    keys = [found.shape.key for found in run_shapes(trace, 3)]
    assert keys == ["mm:8192x50257x1020+nt:fp16", "mm:8192x1020x50257:fp16", "mm:50257x1020x8192+tn:fp16"]
    import torch

    a, b = microbench._operands(torch, cal.Shape("mm", (16, 24, 8), "fp32", layout="tn"), "current", "cpu")
    assert tuple(a.shape) == (16, 8) and a.stride() == (1, 16) and b.is_contiguous()
    a, b = microbench._operands(
        torch, cal.Shape("mm", (10, 20, 30), "fp16", layout="nt"), "fp16_aligned", "cpu"
    )
    assert tuple(b.shape) == (32, 24) and b.stride() == (1, 32) and a.is_contiguous()


def test_a_convolution_without_recorded_parameters_is_timed_as_assumed():
    shape = cal.shape_of("aten::convolution", [[8, 16, 32, 32], [32, 16, 3, 3], []], ["float", "float", ""])
    assert shape is not None and shape.conv == () and "+" not in shape.key
    transposed = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[1, 1]", "1"]
    assert cal.shape_of("aten::convolution", [[8, 16, 32, 32], [16, 32, 3, 3]], ["float"], transposed) is None


def test_speedup_is_weighted_by_each_shapes_share():
    calibration = {
        "device": "gpu",
        "shapes": [
            {"key": "a", "dtype": "fp32", "share": 0.75, "us": {"current": 40.0, "tf32": 10.0}},
            {"key": "b", "dtype": "fp32", "share": 0.25, "us": {"current": 10.0, "tf32": 10.0}},
        ],
    }
    speedup, basis = calibrated_speedup(calibration, "fp32", "tf32")
    assert speedup == pytest.approx(1 / (0.75 * 0.25 + 0.25 * 1.0))
    assert "40 -> 10 µs" in basis
    assert cal.speedups(calibration) == {"fp32->tf32": pytest.approx(speedup)}


def test_cpu_timings_are_never_a_gpus_speedups():
    calibration = {
        "device": "cpu | torch 2.14.1",
        "shapes": [{"key": "a", "dtype": "fp32", "share": 1.0, "us": {"current": 40.0, "tf32": 10.0}}],
    }
    assert calibrated_speedup(calibration, "fp32", "tf32") is None
    assert "timed on the CPU" in calibration_status(calibration)


def test_the_cli_refuses_cuda_without_a_gpu_and_names_the_fix(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybrid.collect.calibrate_run",
            str(FIXTURES / "runs" / "h200-simple_cnn"),
            "--cache",
            str(tmp_path / "c.json"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2 and "--device cpu" in done.stderr
