"""The calibration pass on CPU tensors (a tiny shape), its cache, and the shapes it reads off a real
H200 torch trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.load.torch_trace import load_torch_trace
from hybrid.replay import calibrate as cal
from hybrid.replay.choose import calibrated_speedup
from hybrid.rundir import RunDir

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


def test_a_tiny_gemm_is_timed_in_each_variant_and_cached(tmp_path, monkeypatch):
    cache = tmp_path / "cache.json"
    shape = cal.Shape("mm", (16, 24, 8), "fp32")
    result = cal.calibrate([(shape, 1.0)], device="cpu", cache=cache)
    timings = result["shapes"][0]["us"]
    assert set(timings) == {"current", "tf32", "bf16"} and all(us > 0 for us in timings.values())
    assert shape.key in json.loads(cache.read_text())[result["device"]]

    def fail(*args, **kwargs):
        raise AssertionError("a cached shape was timed again")

    monkeypatch.setattr(cal, "time_shape", fail)
    assert cal.calibrate([(shape, 1.0)], device="cpu", cache=cache)["shapes"][0]["us"] == timings


def test_padded_operands_are_multiples_of_eight():
    import torch

    a, b = cal._operands(torch, cal.Shape("mm", (10, 1020, 4090), "fp16"), "fp16_aligned", "cpu")
    assert tuple(a.shape) == (10 + 6, 4096) and tuple(b.shape) == (4096, 1024)


def test_top_shapes_of_a_real_trace_rank_gemms_by_device_time():
    run = RunDir.open(FIXTURES / "planted" / "tc_fp16_unaligned" / "run")
    shapes = cal.top_shapes(load_torch_trace(run.torch_trace()).ops, 3)
    assert next(s.key for s, _ in shapes) == "mm:8192x50257x1020:fp16"
    assert all(s.dtype == "fp16" for s, _ in shapes) and shapes[0][1] > shapes[-1][1] > 0


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


def test_the_cli_refuses_cuda_without_a_gpu_and_names_the_fix(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybrid.replay.calibrate",
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
