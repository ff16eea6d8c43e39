from pathlib import Path

import pytest

from hybrid.hardware import peaks_for
from hybrid.ncu_pass import attach_counters
from hybrid.nsys_pass import load_nsys_export
from hybrid.provenance import ESTIMATED
from hybrid.roofline import roofline
from hybrid.torch_pass import load_torch_trace
from nsight.ncu_csv import read_ncu_csv

FIXTURES = Path(__file__).parent / "fixtures" / "h200-probe"


def test_fp16_gemm_from_torch_ops_is_compute_bound_near_the_tensor_peak():
    profile = load_torch_trace(FIXTURES / "torch_trace.json")
    peaks = peaks_for(profile.device)
    roof = roofline(profile, peaks)
    mm = next(p for p in roof["kernels"] if p["name"] == "aten::mm")
    # 2*4096^3 FLOPs over A + B + C of 4096^2 halves each
    assert mm["ai"] == pytest.approx(2 * 4096 ** 3 / (3 * 4096 ** 2 * 2))
    assert mm["bound"] == "compute" and mm["precision"] == "fp16" and mm["source"] == ESTIMATED
    # 3 calls of ~178 us: 137 GFLOP each, ~770 TFLOP/s, i.e. ~78% of the 989 TFLOP/s dense fp16 peak
    assert 70 < mm["achieved_pct_of_attainable"] < 85
    assert roof["ridge_point"] == pytest.approx(peaks.flops("fp16") / peaks.dram)
    assert roof["bound"] == "compute" and roof["source"] == ESTIMATED


def test_nsys_only_places_nothing_and_says_why():
    profile = load_nsys_export(FIXTURES / "nsys_matmul_copy.sqlite")
    roof = roofline(profile, peaks_for(profile.device))
    assert roof["bound"] is None and roof["kernels"] == []
    assert "FLOP" in roof["reason"]


def test_counters_without_flop_metrics_are_not_placed_at_zero_intensity():
    # The probe's ncu run collected DRAM bytes and tensor-pipe activity but no FLOP counts.
    profile = attach_counters(load_nsys_export(FIXTURES / "nsys_matmul_copy.sqlite"),
                              read_ncu_csv(FIXTURES / "ncu_metrics_stdout.csv"))
    assert not profile.counters.empty
    roof = roofline(profile, peaks_for(profile.device))
    assert roof["kernels"] == [] and roof["bound"] is None
