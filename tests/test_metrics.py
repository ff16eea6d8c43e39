import sqlite3
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.analysis.metrics import compute_metrics
from hybrid.analysis.tables import top_kernels
from hybrid.hardware import peaks_for
from hybrid.ledger import build_ledger
from hybrid.ledger.causes import IDLE_ORDER
from hybrid.load.nsys_export import load_nsys_export
from hybrid.load.torch_trace import load_torch_trace
from hybrid.profile import KERNEL_COLUMNS, STEP_COLUMNS, DeviceInfo, Profile, conform
from hybrid.provenance import ESTIMATED, MEASURED_NSYS, MEASURED_TORCH
from nsight.intervals import covered, interval_union

FIXTURES = Path(__file__).parent / "fixtures" / "h200-probe"
NSYS = FIXTURES / "nsys_matmul_copy.sqlite"
MIB32 = 32 * 1024 * 1024


@pytest.fixture(scope="module")
def nsys_profile():
    return load_nsys_export(NSYS)


@pytest.fixture(scope="module")
def nsys_metrics(nsys_profile):
    return compute_metrics(nsys_profile, peaks_for(nsys_profile.device))


def _sql(query):
    with sqlite3.connect(f"file:{NSYS}?mode=ro", uri=True) as conn:
        return pd.read_sql_query(query, conn)


def _steady_windows():
    # Hand computation: the NVTX ranges step1..step4 (step0 holds cuBLAS loading, 161 ms).
    ranges = _sql("SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start")
    return ranges.iloc[1:]


def test_interval_union_and_coverage_match_brute_force():
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 10_000, 400)
    ends = starts + rng.integers(1, 200, 400)
    us, ue = interval_union(starts, ends)
    timeline = np.zeros(10_300, bool)
    for s, e in zip(starts, ends, strict=False):
        timeline[s:e] = True
    assert (ue - us).sum() == timeline.sum()
    assert np.all(us[1:] > ue[:-1])
    a = rng.integers(0, 10_000, 50)
    b = a + rng.integers(0, 300, 50)
    expected = [timeline[x:y].sum() for x, y in zip(a, b, strict=False)]
    assert covered(us, ue, a, b).tolist() == expected


def test_first_step_is_named_slowest_and_excluded_as_outlier(nsys_metrics):
    windows = _sql("SELECT end - start AS ns FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start")["ns"]
    assert nsys_metrics["steps_measured"].value == 5
    assert nsys_metrics["steps_excluded"].value == 1
    assert nsys_metrics["slowest_step_ms"].value == pytest.approx(windows.iloc[0] / 1e6)
    assert nsys_metrics["step_time_ms"].value == pytest.approx(windows.iloc[1:].mean() / 1e6)
    assert nsys_metrics["step_time_ms"].source == MEASURED_NSYS


def test_one_pageable_32mib_htod_copy_per_step(nsys_metrics):
    copies = _sql("SELECT start, end, bytes, srcKind FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1")
    steady = copies[copies["start"] > _steady_windows()["start"].min()]
    assert len(steady) == 4 and (steady["bytes"] == MIB32).all() and (steady["srcKind"] == 0).all()
    m = nsys_metrics
    assert m["htod_count"].value == 1
    assert m["htod_bytes"].value == MIB32
    assert m["pageable_copies_per_step"].value == 1
    assert m["htod_ms"].value == pytest.approx((steady["end"] - steady["start"]).mean() / 1e6)
    assert m["pageable_bytes_per_s"].value == pytest.approx(
        MIB32 * 4 / ((steady["end"] - steady["start"]).sum() / 1e9)
    )
    assert m["pageable_copy_share_pct"].value > 99.99  # the other bytes are the 4-byte .item() readback
    assert m["copy_compute_overlap_pct"].value == 0  # one stream: nothing runs under the copy


def test_syncs_per_step_from_item_and_pageable_copy(nsys_metrics):
    syncs = _sql(
        "SELECT r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaStreamSynchronize%'"
    )
    windows = _steady_windows()
    per_step = [
        ((syncs["start"] >= s) & (syncs["start"] < e)).sum() for s, e in windows.itertuples(index=False)
    ]
    assert per_step == [2, 2, 2, 2]
    assert nsys_metrics["sync_count"].value == 2
    assert nsys_metrics["dtoh_count"].value == 1


def test_gpu_busy_is_the_union_of_device_work_inside_steps(nsys_profile, nsys_metrics):
    work = pd.concat(
        [
            _sql(f"SELECT start, end FROM {t}")
            for t in (
                "CUPTI_ACTIVITY_KIND_KERNEL",
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET",
            )
        ]
    )
    busy = []
    for s, e in _steady_windows().itertuples(index=False):
        clipped = work["end"].clip(s, e) - work["start"].clip(s, e)
        busy.append(clipped.sum())  # one stream: device intervals never overlap
    assert nsys_metrics["gpu_busy_ms"].value == pytest.approx(np.mean(busy) / 1e6)
    # The idle time is the ledger's to explain: its idle causes are exactly the device's idle time.
    ledger = build_ledger(nsys_profile, peaks_for(nsys_profile.device))
    per_step = ledger.ms_per_step()
    assert sum(per_step[c] for c in IDLE_ORDER) == pytest.approx(nsys_metrics["gpu_idle_ms"].value)
    # The idle time right after each pageable copy is the host returning from its stream sync.
    segments = ledger.segments
    after_copy = segments[
        segments["start_ns"].isin(_sql("SELECT end FROM CUPTI_ACTIVITY_KIND_MEMCPY")["end"])
    ]
    assert (after_copy["cause"] == "sync_wait").sum() >= 4


def test_kernel_mix_of_the_workload(nsys_metrics):
    m = nsys_metrics
    assert m["kernels_per_step"].value == 4  # x @ x, y * 2, + 1, sum
    assert m["gemm_fp16_time_pct"].value == 100  # nvjet ..._hsh_ is fp16 in, fp32 accumulate, fp16 out
    # The mul, the add and the sum over y run back to back: torch.compile makes them one reduction.
    assert m["fusible_chains_per_step"].value == 1
    assert m["fusible_chain_kernels_per_step"].value == 3
    assert m["fusible_chain_kinds"].value.startswith(("elementwise", "reduction"))
    assert m["fusible_saving_ms"].source == ESTIMATED
    assert m["small_kernel_share_pct"].value == 0


def test_top_kernels_put_the_gemm_first(nsys_profile):
    top = top_kernels(nsys_profile)
    assert top[0]["name"].startswith("nvjet_sm90_hsh")
    assert top[0]["calls_per_step"] == 1
    assert sum(k["share_pct"] for k in top) == pytest.approx(100)


def test_torch_trace_flops_and_precision_are_estimates():
    profile = load_torch_trace(FIXTURES / "torch_trace.json")
    m = compute_metrics(profile, peaks_for(profile.device))
    # three fp16 4096^3 matmuls in the one whole-trace step: 2*M*N*K each (the trace has no FLOP field)
    assert m["est_flops_per_step"].value == pytest.approx(3 * 2 * 4096**3)
    assert m["est_flops_per_step"].source == ESTIMATED
    assert m["matmul_fp16_flops_pct"].value == 100
    assert m["dtoh_count"].source == MEASURED_TORCH
    assert m["misaligned_gemms_per_step"].value == 0  # 4096 is a multiple of 8


@pytest.mark.slow
def test_million_kernels_stay_fast():
    # Scale test only (no claim about a real workload): 1M kernels over 100 steps.
    n, steps = 1_000_000, 100
    start = np.arange(n, dtype=np.int64) * 10_000
    frame = {c: np.zeros(n, np.int64) for c, t in KERNEL_COLUMNS.items() if t == "int64"}
    frame.update(
        start_ns=start,
        end_ns=start + 5_000,
        launch_ns=start - 2_000,
        grid_x=np.full(n, 4),
        grid_y=1,
        grid_z=1,
        block_x=128,
        block_y=1,
        block_z=1,
        step=np.arange(n) // (n // steps),
    )
    frame["name"] = np.where(
        np.arange(n) % 3 == 0, "void at::native::vectorized_elementwise_kernel<4>", "ampere_sgemm_64x64_nn"
    )
    frame["layer"] = None
    bounds = np.arange(steps + 1) * (n // steps) * 10_000
    step_frame = pd.DataFrame(
        {
            "step": np.arange(steps),
            "name": [f"step {i}" for i in range(steps)],
            "start_ns": bounds[:-1],
            "end_ns": bounds[1:],
        }
    )
    profile = Profile(
        steps=conform(step_frame, STEP_COLUMNS),
        kernels=conform(pd.DataFrame(frame), KERNEL_COLUMNS),
        device=DeviceInfo(name="NVIDIA H100 80GB HBM3", sm_count=132, source=MEASURED_NSYS),
    )
    began = time.perf_counter()
    m = compute_metrics(profile, peaks_for(profile.device))
    assert time.perf_counter() - began < 30
    assert m["kernels_per_step"].value == n // steps
    assert m["gpu_util_pct"].value == pytest.approx(50, abs=0.01)
    assert m["small_kernel_share_pct"].value == 100
