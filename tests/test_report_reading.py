"""What the default report tells a reader before the numbers, on real runs: the warnings that change the
reading are shown (not folded), "not measured" placeholders are limitations rather than bottlenecks, a run
with no GPU reports no GPU finding, the raw artifacts come with the command that opens them, and the
one-step timeline of results.json matches the profile it was drawn from."""

from __future__ import annotations

import copy
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.analysis.step_timeline import MAX_EVENTS, representative_step
from hybrid.analysis.steps import steady_steps
from hybrid.load.nsys_export import load_nsys_export
from hybrid.pipeline import analyze_run_dir
from hybrid.report.html_report import render_html
from hybrid.report.terminal import render_terminal

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
RESNET = FIXTURES / "runs" / "h200-resnet50"


@pytest.fixture(scope="module")
def resnet() -> dict:
    return analyze_run_dir(RESNET)


def test_warnings_that_change_the_reading_are_in_the_default_view(resnet):
    text = " ".join(render_terminal(resnet, color=False).split())
    assert "warning: ncu counters cover only 24.1% of the measured GPU time" in text
    assert "more limitations/warnings" not in text


def test_a_collector_that_slowed_the_step_is_said():
    # graph_breaks on the H200: 17.8 ms a step under torch.profiler, 13 ms under nsys.
    results = analyze_run_dir(FIXTURES / "planted" / "graph_breaks" / "run")
    text = " ".join(render_terminal(results, color=False).split())
    assert "warning: the torch pass's step was +37.5% slower than the nsys pass's (17.8 ms vs 13 ms)" in text
    assert html.escape("the torch pass's step was +37.5% slower") in render_html(results)


def test_low_step_confidence_is_said_and_its_absence_tolerated(resnet):
    assert "confidence" not in render_terminal(resnet, color=False)
    unsure = copy.deepcopy(resnet)
    unsure["workload"].update(
        step_source="periodicity", step_confidence="low", step_reason="no marks, no optimizer"
    )
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", render_html(unsure))).split())
    assert "warning: steps found by periodicity with low confidence (no marks, no optimizer)" in text
    assert "warning: steps found by periodicity" in " ".join(render_terminal(unsure, color=False).split())


def test_not_measured_placeholders_are_limitations_not_bottlenecks():
    # healthy_bf16_gemm's ncu pass failed on the GPU box: the analysis has three "not measured" placeholders.
    results = analyze_run_dir(FIXTURES / "planted" / "healthy_bf16_gemm" / "run")
    placeholders = [f for f in results["diagnosis"]["bottlenecks"] if f.get("not_measured")]
    assert len(placeholders) == 3
    text = render_terminal(results, color=False, verbose=True)
    assert "Bottlenecks: none detected in what this run measured" in text
    flat = " ".join(text.split())
    for finding in placeholders:
        assert f"limitation: {finding['title']}" in flat
    assert "Bottlenecks (" not in render_html(results)


def hybrid(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(
        [sys.executable, "-m", "hybrid", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def test_a_run_without_a_gpu_reports_no_gpu_finding(tmp_path):
    # The planted script draws tensors on the host and moves them to the device: with no GPU, "moved to the
    # GPU" cannot hold (it did, failing --fail-on LOW, before the guard).
    done = hybrid(
        "run",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--quiet",
        "--json",
        "--fail-on",
        "LOW",
        "-o",
        str(tmp_path / "run"),
        "cpu_tensors_then_moved.py",
        cwd=ROOT / "benchmarks" / "planted",
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["mode"] == "cpu-only" and results["diagnosis"]["bottlenecks"] == []
    assert results["timeline"] is None


def test_each_artifact_comes_with_the_command_that_opens_it(resnet, tmp_path):
    assert resnet["artifacts"] == {"torch_trace": "torch/trace.json.gz", "nsys_export": "nsys/profile.sqlite"}
    run = tmp_path / "run"
    shutil.copytree(RESNET, run)
    (run / "nsys" / "profile.nsys-rep").write_bytes(b"")  # the fixture keeps only the export
    (run / "ncu" / "report.ncu-rep").write_bytes(b"")
    done = hybrid("report", str(run))
    assert done.returncode == 0, done.stderr
    assert f"nsys-ui {run}/nsys/profile.nsys-rep" in done.stdout
    assert f"ncu-ui {run}/ncu/report.ncu-rep" in done.stdout
    assert f"https://ui.perfetto.dev and load {run}/torch/trace.json.gz" in done.stdout


def test_the_timeline_is_the_median_steady_step_of_the_profile(resnet):
    timeline = resnet["timeline"]
    profile = load_nsys_export(RESNET / "nsys" / "profile.sqlite")
    step = representative_step(profile)
    assert timeline["step"] == int(step["step"])
    durations = sorted(steady_steps(profile)["dur_ns"])
    assert timeline["duration_us"] * 1e3 == pytest.approx(durations[(len(durations) - 1) // 2], abs=10)
    assert len(timeline["events"]) <= MAX_EVENTS and timeline["events_total"] == len(timeline["events"])
    window = (int(step["start_ns"]), int(step["end_ns"]))
    kernels = profile.kernels[
        (profile.kernels["end_ns"] > window[0]) & (profile.kernels["start_ns"] < window[1])
    ]
    drawn = [e for e in timeline["events"] if e[1] == "kernel"]
    assert len(drawn) == len(kernels)
    assert all(e[2] >= 0 and e[2] + e[3] <= timeline["duration_us"] + 0.01 for e in timeline["events"])
    assert timeline["lanes"][0].startswith("host thread") and any(
        lane.startswith("stream") for lane in timeline["lanes"]
    )
    # The FP32 GEMMs the primary finding is about are the kernels drawn in colour.
    page = render_html(resnet)
    assert "In colour: the GEMM and convolution kernels" in page and 'class="tl-kernel lit"' in page


def test_a_jobs_artifacts_are_those_of_its_representative_rank():
    from hybrid.pipeline import analyze_job

    job = FIXTURES / "jobs" / "h200-ddp-slow-rank"
    results = analyze_job(job)
    rank = results["job"]["representative_rank"]
    assert results["artifacts"]["torch_trace"] == f"rank-{rank:02d}/torch/trace.json.gz"
    assert (job / results["artifacts"]["torch_trace"]).is_file()


def test_what_the_passes_line_says_is_folded_in_the_default_view():
    """The torchaudio stranger on the H200: torch.profiler slowed its step by 101% and nsys by 29% against the
    plain pass, and ncu was skipped. The Passes line gives those; the full notes are verbose's."""
    results = analyze_run_dir(FIXTURES / "unmarked_runs" / "torchaudio_frontend_train" / "run")
    default = " ".join(render_terminal(results, color=False).split())
    verbose = " ".join(render_terminal(results, verbose=True, color=False).split())
    assert "overhead +101%" in default and "ncu skipped (counters cannot change the primary" in default
    for note in ("warning: the torch pass slowed the step by +101%", "warning: ncu pass skipped:"):
        assert note not in default and note in verbose
    assert re.search(r"\+ \d+ more notes \(--verbose\)", default)
