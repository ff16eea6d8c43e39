"""Multi-process jobs on the CPU: real torchrun launches of a 2-rank gloo DDP script
(tests/scripts/ddp_train.py) through hybrid.collect.torchrun.run_job or `hybrid run --nproc-per-node`,
analyzed by hybrid.pipeline.analyze_job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hybrid_cli import run_hybrid

from hybrid.analysis.job_metrics import collective_kind, find_rank_dirs, uncovered_ns, union
from hybrid.collect.orchestrate import SHORT_PLAIN_STEPS, RunOptions, Target
from hybrid.collect.torchrun import JobOrchestrator, parse_torchrun_argv, run_job
from hybrid.errors import UsageError, WorkloadError
from hybrid.load.torch_trace import load_torch_trace
from hybrid.pipeline import analyze_job, rank_path
from hybrid.rules.communication import hideable_comm_ms, unhideable_comm_ms
from hybrid.schema import missing_keys

SCRIPT = str(Path(__file__).parent / "scripts" / "ddp_train.py")
REPO = Path(__file__).resolve().parent.parent


def _options(out: Path, steps: int = 4) -> RunOptions:
    return RunOptions(out_dir=out, mode="torch", warmup=2, steps=steps)


def _finding(results: dict, finding_id: str) -> dict | None:
    return next((f for f in results["diagnosis"]["bottlenecks"] if f["id"] == finding_id), None)


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory) -> tuple[Path, dict]:
    run_dir = run_job([SCRIPT, "--mode", "ddp"], _options(tmp_path_factory.mktemp("ddp") / "run"), 2, None)
    return run_dir, analyze_job(run_dir)


@pytest.fixture(scope="module")
def straggler_job(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, dict]:
    """One `hybrid run --nproc-per-node 2 --html --json` of a job whose rank 1 sleeps 30 ms a step (each rank
    imports torch: 9.6 s of CPU a run), read by the straggler tests below: what the CLI printed and rendered,
    and what analyze_job makes of its folder. test_cli ran the same job through the CLI for its own tests
    (12 s of CPU); ddp_job and manual_job above run theirs through run_job in this process."""
    out = tmp_path_factory.mktemp("straggler") / "job"
    done = run_hybrid(
        "run",
        "--nproc-per-node",
        "2",
        "--steps",
        "4",
        "--warmup",
        "2",
        "--out",
        str(out),
        "--html",
        "--json",
        SCRIPT,
        "--slow-rank",
        "1",
        "--sleep-ms",
        "30",
    )
    assert done.returncode == 0, done.stderr
    return done, out, analyze_job(out)


@pytest.fixture(scope="module")
def manual_job(tmp_path_factory) -> tuple[Path, dict]:
    # Launched as a user with their own torchrun flags would: `hybrid run -- torchrun ...`. Batch 512 gives
    # each rank as much compute as communication (about 15 ms each a step with two jobs sharing the 2-core
    # box), so overlap could hide 13-19% of the step. At the default batch of 64 the all-reduces took 4x the
    # compute: overlap could hide only 6% of the step under load, and once on CI (2026-12-07) under the
    # finding's 5% floor.
    torchrun = [
        "torchrun",
        "--nproc-per-node",
        "2",
        "--standalone",
        SCRIPT,
        "--mode",
        "manual",
        "--batch",
        "512",
    ]
    run_dir = run_job(None, _options(tmp_path_factory.mktemp("manual") / "run"), None, torchrun)
    return run_dir, analyze_job(run_dir)


def test_ddp_job_end_to_end(ddp_job):
    run_dir, results = ddp_job
    assert sorted(p.name for p in find_rank_dirs(run_dir).values()) == ["rank-00", "rank-01"]
    for rank in (0, 1):
        folder = rank_path(run_dir, rank)
        inject = json.loads((folder / "torch" / "inject.json").read_text())
        assert inject["outcome"] == "step_limit" and inject["measured_steps"] == 4
        assert (folder / "torch" / "trace.json").is_file()
    command = (run_dir / "torch" / "command.txt").read_text()
    assert "torch.distributed.run --nproc-per-node 2" in command and "-m hybrid.inject.rank" in command
    assert missing_keys(results) == []
    job = results["job"]
    assert job["ranks"] == [0, 1] and job["backend"] == "gloo" and job["comm_source"] == "measured:torch"
    assert "all_reduce" in job["comm_by_collective_ms"]
    # DDP reduces its one bucket once per step on every rank, and every collective lines up across ranks.
    assert job["collectives_matched"] == 4
    for rank in ("0", "1"):
        per_rank = job["per_rank"][rank]
        assert per_rank["steps"] == 4 and per_rank["collectives_per_step"] == 1
        # Means per step against the rank's longest step: its step_time_ms is the steady steps' figure, and on
        # a
        # loaded 2-core box one step's all-reduce wait (15.5 ms against a 10.2 ms steady step) lifts the mean.
        steps = load_torch_trace(rank_path(run_dir, int(rank)) / "torch" / "trace.json").steps
        longest = float((steps["end_ns"] - steps["start_ns"]).max()) / 1e6
        assert 0 < per_rank["comm_ms"] <= longest
        assert 0 < per_rank["compute_ms"] <= longest
        assert per_rank["exposed_comm_ms"] <= per_rank["comm_ms"]
    assert set(results["ranks"]) == {"0", "1"}
    with pytest.raises(UsageError):
        rank_path(run_dir, 2)


@pytest.mark.slow
def test_straggler_is_rank_1(straggler_job):
    _done, _out, results = straggler_job
    job = results["job"]
    assert job["straggler"]["rank"] == 1 and job["straggler"]["arrived_last_pct"] >= 75
    # Rank 1 sleeps 30 ms a step outside the collectives; rank 0 waits most of that in the all-reduce.
    assert job["straggler"]["wait_ms_by_rank"]["0"] > 15 > job["straggler"]["wait_ms_by_rank"]["1"]
    finding = _finding(results, "comm.straggler")
    assert finding is not None and finding["category"] == "COMMUNICATION"
    assert "Rank 1" in finding["title"]
    assert next(e for e in finding["evidence"] if e["label"] == "straggler rank")["value"] == 1
    assert finding["time_lost_ms"] > 15
    assert results["diagnosis"]["primary_bottleneck"]["id"] == "comm.straggler"
    assert job["representative_rank"] == 1


@pytest.mark.slow
def test_multi_process_run_reports_the_job_then_one_rank(straggler_job):
    done, out, _results = straggler_job
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["job"]["world_size"] == 2 and results["job"]["straggler"]["rank"] == 1
    assert results["diagnosis"]["primary_bottleneck"]["category"] == "COMMUNICATION"
    shown = run_hybrid("report", str(out))
    assert shown.returncode == 0 and "Job: 2 ranks" in shown.stdout and "straggler rank 1" in shown.stdout
    one = run_hybrid("report", str(out), "--rank", "0", "--json")
    assert one.returncode == 0, one.stderr
    assert "job" not in json.loads(one.stdout)
    missing = run_hybrid("report", str(out), "--rank", "5")
    assert missing.returncode == 2 and "no rank 5" in missing.stderr


@pytest.mark.slow
def test_html_shows_ranks_side_by_side(straggler_job):
    done, out, _results = straggler_job
    assert done.returncode == 0, done.stderr
    straggler = (json.loads(done.stdout)["job"].get("straggler") or {}).get("rank")
    page = (out / "report.html").read_text()
    assert "Ranks side by side (2 ranks, gloo" in page
    for rank in (0, 1):
        label = f"rank {rank}" + (" (straggler)" if rank == straggler else "")
        assert f"<td>{label}</td>" in page


@pytest.mark.slow
def test_manual_allreduce_is_exposed(manual_job):
    run_dir, results = manual_job
    assert "--standalone" in (run_dir / "torch" / "command.txt").read_text()
    job = results["job"]
    # Four blocking all-reduces after backward() each step: nothing computes while they run.
    assert job["per_rank"]["0"]["collectives_per_step"] == 4
    assert job["metrics"]["overlap_pct"]["value"] < 10
    finding = _finding(results, "comm.exposed")
    assert finding is not None and finding["time_lost_ms"] > 0
    exposed = next(e for e in finding["evidence"] if e["label"] == "exposed (no compute running)")
    assert exposed["source"] == "measured:torch" and exposed["value"] > 0


@pytest.mark.slow
def test_crashing_rank_stops_the_job_and_keeps_folders(tmp_path):
    # Iteration 14: after 2 warmup steps, the torch pass's 10-step plain window (timed before torch.profiler
    # starts) and 2 profiled steps, so the ranks have something profiled to keep.
    crash_at = 2 + SHORT_PLAIN_STEPS + 2
    with pytest.raises(WorkloadError) as raised:
        run_job(
            [SCRIPT, "--crash-rank", "1", "--crash-at", str(crash_at)], _options(tmp_path / "run"), 2, None
        )
    error = raised.value
    assert error.exit_code == 3
    assert "rank 1 failed first" in error.cause
    reports = {rank: tmp_path / "run" / f"rank-0{rank}" / "torch" / "inject.json" for rank in (0, 1)}
    # Once on the loaded 2-core CI box (2026-12-05) rank 1 died after raising, before writing its
    # report (its finally destroys the process group while rank 0 may be mid-collective): then only
    # torchrun's summary names it, as the next test plants.
    if reports[1].exists():
        assert "planted failure on rank 1" in error.cause
        assert json.loads(reports[1].read_text())["outcome"] == "exception"
    else:
        assert "per torchrun" in error.cause
    # Rank 0 either raises on its peer's closed socket or, when torchrun's SIGTERM comes first, is stopped.
    assert json.loads(reports[0].read_text())["outcome"] in ("exception", "interrupted")
    assert "rank-00" in error.kept and "rank-01" in error.kept
    # What rank 0 gathered before the crash still analyzes: two measured steps.
    results = analyze_job(tmp_path / "run")
    assert results["ranks"]["0"]["step_time_ms"] is not None


@pytest.mark.slow
def test_a_rank_dying_outside_python_is_named_from_torchruns_summary(tmp_path):
    # Rank 1 dies by SIGABRT (a C++ library aborting): no inject.json, and rank 0 raises on the
    # connection it reset. The peer's error is collateral; the silent rank is the cause.
    crash = ["--crash-rank", "1", "--crash-at", str(2 + SHORT_PLAIN_STEPS + 2), "--crash-how", "abort"]
    with pytest.raises(WorkloadError) as raised:
        run_job([SCRIPT, *crash], _options(tmp_path / "run"), 2, None)
    cause = raised.value.cause
    assert "rank 1: ended without a report (exit code -6, SIGABRT per torchrun)" in cause
    assert "rank 1 failed first (exit code -6, SIGABRT per torchrun)" in cause
    assert "Connection reset by peer" not in cause.split("failed first")[1]


@pytest.mark.slow
def test_wrap_runs_only_the_named_rank_under_the_collector(tmp_path):
    orchestrator = JobOrchestrator(
        Target([SCRIPT, "--record-env", str(tmp_path)]),
        _options(tmp_path / "run", 1),
        nproc=2,
        launcher_flags=[],
    )
    wrap = orchestrator._write_wrap("plain", [1], ["env", "HYBRID_WRAPPED={rank_dir}"])
    argv = orchestrator.inject_argv("plain", steps=1, whole_run=False, wrap=wrap)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    records = {r: json.loads((tmp_path / f"rank{r}.json").read_text())["wrapped"] for r in (0, 1)}
    assert records == {0: None, 1: str(tmp_path / "run" / "rank-01")}


def test_parse_torchrun_argv():
    flags, target, nproc = parse_torchrun_argv(
        ["torchrun", "--nnodes", "1", "--nproc-per-node", "4", "-m", "pkg.train", "--lr", "0.1"]
    )
    assert flags == ["--nnodes", "1", "--nproc-per-node", "4"]
    assert target.argv == ["pkg.train", "--lr", "0.1"] and target.is_module and nproc == 4
    flags, target, _ = parse_torchrun_argv([sys.executable, "-m", "torch.distributed.run", "train.py", "-x"])
    assert flags == [] and target.argv == ["train.py", "-x"] and not target.is_module
    with pytest.raises(UsageError):
        parse_torchrun_argv(["torchrun", "--no-python", "./a.out"])


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "all_reduce"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "all_gather"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"),
        ("ncclDevKernel_Broadcast_RING_LL", "broadcast"),
        ("ncclDevKernel_SendRecv", "send_recv"),
        ("gloo:all_reduce", "all_reduce"),
        ("nccl:all_to_all", "all_to_all"),
        ("gloo:barrier", "barrier"),
    ],
)
def test_collective_kind(name, kind):
    assert collective_kind(name) == kind


def test_exposed_time_is_communication_not_covered_by_compute():
    comm = union(np.array([0, 50, 60]), np.array([40, 70, 100]))  # 0-40, 50-100
    compute = union(np.array([10, 80]), np.array([20, 200]))  # 10-20, 80-200
    assert uncovered_ns(comm, compute) == 30 + 30


def test_overlap_estimates():
    # 10 ms exposed of which 4 ms waiting for a peer; 2 ms already overlapped, 5 ms compute left to hide
    # under.
    assert hideable_comm_ms(10.0, 4.0, 12.0, 7.0) == 5.0
    assert hideable_comm_ms(10.0, 4.0, 12.0, 30.0) == 6.0
    assert unhideable_comm_ms(12.0, 4.0, 5.0) == 3.0
    assert unhideable_comm_ms(12.0, 4.0, 20.0) == 0.0


@pytest.mark.slow
def test_manual_allreduce_replays_with_the_reductions_spread_through_backward(manual_job):
    _, results = manual_job
    collectives = results["job"]["collectives"]
    exposed = collectives["by_collective"]["all_reduce"]["exposed_ms"]
    assert collectives["backward_seen"] is True and exposed > 0
    spread = collectives["replay"]["fixes"]["spread"]
    # Issued as the backward makes each gradient, the all-reduces can hide at most the time a rank waited on
    # them, which is within its exposed communication.
    most_exposed = max(m["exposed_comm_ms"] for m in results["job"]["per_rank"].values())
    assert 0 <= spread["saving_ms"] <= most_exposed * 1.001
    assert collectives["replay"]["best"] == "spread"
