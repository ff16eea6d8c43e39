"""Two-rank DDP jobs over NCCL captured on two H200s (tests/fixtures/jobs, see its README), analyzed
offline: the straggler, exposed communication, a healthy job, NCCL kernels kept out of the compute
findings, and the ncu rank's counters shared with the other rank."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from hybrid.pipeline import analyze_job
from hybrid.rules.base import SEVERITY_RANK

JOBS = Path(__file__).parent / "fixtures" / "jobs"
SLEEP_MS = 30.0  # --slow-rank 1 --sleep-ms 30


@cache
def job(name: str) -> dict:
    return analyze_job(JOBS / f"h200-ddp-{name}")


def findings(results: dict) -> dict[str, dict]:
    return {f["id"]: f for f in results["diagnosis"]["bottlenecks"]}


def test_a_rank_that_sleeps_is_the_straggler_and_the_primary_finding():
    results = job("slow-rank")
    straggler = results["job"]["straggler"]
    assert straggler["rank"] == 1 and straggler["arrived_last_pct"] == 100.0
    # Rank 0 waits in its all-reduce for rank 1's sleep, less the compute rank 1 overlaps with it.
    assert SLEEP_MS * 0.9 <= straggler["lateness_ms"] <= SLEEP_MS * 1.2
    primary = results["diagnosis"]["primary_bottleneck"]
    assert (primary["id"], primary["category"], primary["severity"]) == (
        "comm.straggler",
        "COMMUNICATION",
        "CRITICAL",
    )
    # Its evidence points at what the straggler itself does: its host idles the GPU (the sleep).
    own = next(e for e in primary["evidence"] if e["label"] == "rank 1's own top finding")
    assert own["value"] == "The GPU waits while the host computes without launching work"
    assert results["job"]["ncu_rank"] == 1  # ncu went to the straggler, as the orchestrator said why


def test_all_reduce_after_backward_is_exposed_communication():
    results = job("manual-allreduce")
    metrics = results["job"]["metrics"]
    assert metrics["overlap_pct"]["value"] < 1.0
    assert metrics["exposed_comm_ms"]["value"] == pytest.approx(metrics["comm_ms"]["value"], rel=0.01)
    primary = results["diagnosis"]["primary_bottleneck"]
    assert (primary["id"], primary["category"]) == ("comm.exposed", "COMMUNICATION")
    assert results["job"]["straggler"] is None


def test_a_healthy_ddp_job_overlaps_and_nothing_is_severe():
    results = job("healthy")
    assert results["job"]["metrics"]["overlap_pct"]["value"] > 50.0
    worst = max(SEVERITY_RANK[f["severity"]] for f in results["diagnosis"]["bottlenecks"])
    assert worst < SEVERITY_RANK["SEVERE"]


@pytest.mark.parametrize("name", ["healthy", "slow-rank", "manual-allreduce"])
def test_nccl_kernels_are_not_compute_findings(name):
    # An NCCL kernel (a few blocks, spinning while it waits for its peer) once read as 27 ms of
    # small-grid kernels on the slow-rank job, and as far below the roofline on the manual one.
    found = findings(job(name))
    assert "occupancy.small_grid" not in found and "roofline.low_efficiency" not in found


def test_the_rank_without_ncu_takes_the_ncu_ranks_counters():
    results = job("manual-allreduce")
    ncu_rank = results["job"]["ncu_rank"]
    other = 1 - ncu_rank
    assert not (JOBS / "h200-ddp-manual-allreduce" / f"rank-0{other}" / "ncu" / "counters.csv").exists()
    assert results["ranks"][str(other)]["mode"] == "hybrid"
