"""ncu averages weighted by each profiled kernel's GPU time per step, on the real resnet50 b32 H200 run
(nsys timeline + ncu counters on a few kernel names)."""

from pathlib import Path

import numpy as np
import pytest

from hybrid.analysis.kernel_classes import MATMUL_KINDS, profile_kernel_classes
from hybrid.analysis.metrics import compute_metrics
from hybrid.analysis.steps import steady_steps
from hybrid.hardware import peaks_for
from hybrid.load.ncu_match import attach_counters
from hybrid.load.nsys_export import load_nsys_export
from hybrid.profile import MATCH_CONFIG, MATCH_LAUNCH, counters_per_kernel
from nsight.ncu_csv import parse_ncu_csv

RESNET50 = Path(__file__).parent / "fixtures" / "runs" / "h200-resnet50"


@pytest.fixture(scope="module")
def profile():
    return attach_counters(
        load_nsys_export(RESNET50 / "nsys" / "profile.sqlite"),
        parse_ncu_csv(RESNET50 / "ncu" / "counters.csv"),
    )


@pytest.fixture(scope="module")
def metrics(profile):
    return compute_metrics(profile, peaks_for(profile.device))


@pytest.fixture(scope="module")
def launches(profile):
    """Every kernel launch of the steady steps that a profiled kernel stands for, with its counters."""
    joined = counters_per_kernel(profile)
    steady = joined["step"].isin(steady_steps(profile)["step"])
    matched = joined[steady & joined["counter_match"].isin([MATCH_LAUNCH, MATCH_CONFIG])]
    return matched.assign(ns=matched["end_ns"] - matched["start_ns"])


@pytest.mark.parametrize(
    "name,col",
    [
        ("ncu_achieved_occupancy_pct", "achieved_occupancy_pct"),
        ("ncu_l2_hit_pct", "l2_hit_pct"),
        ("ncu_l1_hit_pct", "l1_hit_pct"),
        ("ncu_sectors_per_request", "global_load_sectors_per_request"),
        ("ncu_sm_throughput_pct", "sm_throughput_pct"),
    ],
)
def test_average_is_over_the_launches_of_the_timeline_weighted_by_their_duration(
    metrics, launches, name, col
):
    # Computed launch by launch from the joined frame: each launch carries its kernel's counters and
    # weighs its own timeline duration.
    ok = launches[col].notna()
    values = launches.loc[ok, col].clip(upper=100) if col.endswith("_pct") else launches.loc[ok, col]
    expected = float(np.average(values, weights=launches.loc[ok, "ns"]))
    assert metrics[name].value == pytest.approx(expected, rel=1e-9)
    assert metrics[name].source == "measured:ncu"


def test_weighting_by_launches_moves_the_averages_off_one_row_per_kernel(profile, metrics):
    # The old figure weighed each profiled kernel by one replayed launch; resnet50 launches its
    # kernels between 1 and dozens of times a step, so the two disagree by points, not rounding.
    c = profile.counters
    per_row = float(np.average(c["l2_hit_pct"].clip(upper=100), weights=c["duration_ns"]))
    assert abs(metrics["ncu_l2_hit_pct"].value - per_row) > 2.0


def test_gemm_tensor_pipe_is_over_gemm_kernels_only(profile, metrics, launches):
    classes = profile_kernel_classes(profile, launches["name"], None).reindex(launches["name"].astype(str))
    is_gemm = classes["kind"].isin(MATMUL_KINDS).to_numpy()
    gemm = launches[is_gemm]
    assert len(gemm) and len(gemm) < len(launches)
    expected = float(np.average(gemm["tensor_pipe_pct"].clip(upper=100), weights=gemm["ns"]))
    assert metrics["ncu_gemm_tensor_pipe_pct"].value == pytest.approx(expected, rel=1e-9)
    # resnet50 with TF32 off: every profiled GEMM/conv measured FP32 (no tensor FLOPs), so no figure for
    # others.
    assert set(classes.loc[is_gemm, "precision"]) == {"fp32"}
    assert set(classes.loc[is_gemm, "precision_source"]) == {"measured:ncu"}
    assert "ncu_non_fp32_gemm_tensor_pipe_pct" not in metrics


def test_dram_rate_counts_each_kernel_as_often_as_it_runs(profile, metrics, launches):
    c = profile.counters.reset_index(drop=True)
    per_step = launches.groupby("step").size().mean()
    counts = launches.groupby(launches.index.map(lambda i: profile.kernel_counters["counter_row"][i])).size()
    counts = counts / launches["step"].nunique()
    assert counts.sum() == pytest.approx(per_step)
    nbytes = (c["dram_read_bytes"] + c["dram_write_bytes"]).loc[counts.index]
    expected = float((nbytes * counts).sum() / ((c["duration_ns"].loc[counts.index] * counts).sum() / 1e9))
    assert metrics["ncu_dram_bytes_per_s"].value == pytest.approx(expected, rel=1e-9)
