"""Host work a sync leaves exposed belongs to the sync, on the H100 capture of
benchmarks/planted/sync_cuda_synchronize.py (tests/fixtures/runs/h100-sync-cuda-synchronize, `hybrid run
--verify 3 --warmup 3 --steps 5`, session 21): each step samples its batch with numpy (~4 ms) right after a
torch.cuda.synchronize() that found the GPU already idle, so the device waits for the sampling. The fixed twin
(no synchronize) saved 4.5 of 11.5 ms a step on the H200 (benchmarks/results/planted.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.pipeline import analyze_run_dir

RUN = Path(__file__).parent / "fixtures" / "runs" / "h100-sync-cuda-synchronize"


@pytest.fixture(scope="module")
def results() -> dict:
    return analyze_run_dir(RUN)


def _metric(results: dict, name: str) -> float:
    return results["metrics"][name]["value"]


def _finding(results: dict, rule: str) -> dict:
    return next(f for f in results["diagnosis"]["bottlenecks"] if f["id"] == rule)


def test_the_host_work_after_a_sync_entered_in_an_idle_gap_is_the_syncs(results):
    # The 33 us sync opens no gap (the GPU was idle before it); the 4.1 ms of sampling after it was
    # "other host work" when only gaps opened inside a sync counted.
    assert _metric(results, "idle_host_after_sync_ms") > 4.0
    assert _metric(results, "idle_host_other_ms") < 1.0


def test_the_sync_is_the_primary_and_its_advice_is_to_remove_the_explicit_syncs(results):
    assert results["diagnosis"]["primary_bottleneck"]["id"] == "sync.per_step"
    sync = _finding(results, "sync.per_step")
    # Every sync a step is cudaDeviceSynchronize (4.2 a step: the script's four and the step hook's last
    # one): torch.cuda.set_sync_debug_mode would flag none of them.
    assert _metric(results, "device_sync_count") == pytest.approx(_metric(results, "sync_count"))
    assert "torch.cuda.synchronize()" in sync["suggestions"][0]
    assert not any("set_sync_debug_mode" in s for s in sync["suggestions"])
    # At most what the syncs blocked the host (3.62 ms under nsys): the host and the GPU overlap without them.
    assert sync["time_lost_ms"] <= _metric(results, "sync_blocked_ms") + 1e-9
    assert sync["time_lost_ms"] > 0.75 * _metric(results, "sync_blocked_ms")


def test_host_work_that_is_not_operators_is_not_called_the_frameworks_dispatch(results):
    # 0.39 ms of autograd nodes are 67% of the host-only operators but 8% of the 5.1 ms of host work the GPU
    # waits for: the rest is the script's numpy sampling.
    host = _finding(results, "cpu.preprocessing")
    assert "framework's own dispatch" not in host["title"]
    assert not any("torch.cuda.graph around forward" in s for s in host["suggestions"])
