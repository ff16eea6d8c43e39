"""What the default report tells a reader before the numbers, on real runs: the warnings that change the
reading are shown (not folded), "not measured" placeholders are limitations rather than bottlenecks, a run
with no GPU reports no GPU finding, the raw artifacts come with the command that opens them, and the
one-step timeline of results.json matches the profile it was drawn from; and the default report of every
committed capture reads in one screen, keeping what a reader acts on, with what it folds in --verbose."""

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

from hybrid.analysis.job_metrics import is_job_dir
from hybrid.analysis.step_timeline import MAX_EVENTS, representative_step
from hybrid.analysis.steps import steady_steps
from hybrid.load.nsys_export import load_nsys_export
from hybrid.pipeline import analyze_run_dir
from hybrid.report.html_report import render_html
from hybrid.report.terminal import render_terminal
from hybrid.rundir import RunDir

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


@pytest.mark.slow
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
    # With no finding there are no lines to name and no saving to replay: neither is a limitation of it.
    assert not [n for n in results["limitations"] if n.startswith(("no callsites", "No replay of the step"))]


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


# The default report reads in one screen (README's standard: details behind --verbose and in the HTML/JSON).
SCREEN_LINES = 60  # at REPORT_WIDTH columns; verify/hf_trainer_tf32_paired, the longest, read 109 before
REPORT_WIDTH = 100


def _report_inputs() -> list[Path]:
    """What `hybrid report` accepts under tests/fixtures: run directories with their artifacts or with a
    results.json alone, torchrun jobs (their ranks read with them) and nsys exports made outside a run
    directory."""
    dirs = {
        marker.parent
        for name in ("run.json", "results.json")
        for marker in FIXTURES.glob(f"**/{name}")
        if not any(part.startswith("rank-") for part in marker.parts)
    }
    kept = [d for d in dirs if is_job_dir(d) or _has_artifacts(d) or (d / "results.json").is_file()]
    exports = [
        p
        for p in FIXTURES.glob("**/*.sqlite")
        if not (p.parent.parent / "run.json").is_file() and not any(x.startswith("rank-") for x in p.parts)
    ]
    return sorted(kept) + sorted(exports)


def _has_artifacts(folder: Path) -> bool:
    """A trace or an export, as hybrid.rundir finds them: a folder holding only a pass's records (a verify
    record's torch/inject.json) is not a capture."""
    run = RunDir(folder)
    return run.torch_trace() is not None or run.nsys_export() is not None


def _reported(capture: Path) -> dict:
    """The results `hybrid report CAPTURE` renders: analyzed once per test session (tests/conftest.py), or
    the saved document where the artifacts are gone."""
    from hybrid import pipeline

    if capture.suffix == ".sqlite":
        return pipeline.analyze_export(capture)
    if is_job_dir(capture):
        return pipeline.analyze_job(capture)
    if _has_artifacts(capture):
        return pipeline.analyze_run_dir(capture)
    return json.loads((capture / "results.json").read_text())


REPORT_INPUTS = _report_inputs()


def _flat(text: str) -> str:
    """The report's words with its line wraps undone."""
    return " ".join(text.split())


def test_every_committed_capture_is_found():
    # 40 run directories and jobs, 12 exports, 17 unmarked runs kept as results.json alone (2026-12).
    assert len(REPORT_INPUTS) >= 60


@pytest.mark.parametrize("capture", REPORT_INPUTS, ids=lambda p: "/".join(p.relative_to(FIXTURES).parts))
def test_every_capture_reads_in_one_screen(capture):
    text = render_terminal(_reported(capture), color=False)
    lines = text.splitlines()
    assert len(lines) <= SCREEN_LINES, text
    assert max(map(len, lines)) <= REPORT_WIDTH


# Real captures whose primary finding has a callsite: the --verify run with a realized column, the stranger
# weighed at its plain step, a planted run with its own loop.
READ = {
    "hf_verify": FIXTURES / "verify" / "hf_trainer_tf32_paired" / "run",
    "torchaudio": FIXTURES / "unmarked_runs" / "torchaudio_frontend_train" / "run",
    "numpy_augment": FIXTURES / "callsites" / "planted" / "cpu_numpy_augment" / "run",
}


@pytest.fixture(scope="module", params=list(READ))
def read(request) -> dict:
    return _reported(READ[request.param])


def _primary(results: dict) -> dict:
    from hybrid.report.common import findings_by_impact

    primary_id = results["diagnosis"]["primary_bottleneck"]["id"]
    return next(f for f in findings_by_impact(results) if f["id"] == primary_id)


def test_the_default_report_keeps_what_a_reader_acts_on(read):
    from hybrid.report.common import format_value, weighed_lost_ms
    from hybrid.report.terminal import EVIDENCE_DEFAULT

    text = render_terminal(read, color=False)
    words = _flat(text)
    timing = read["timing"]
    assert f"Step {format_value(timing['step_time_ms'], 'ms')}" in words
    primary = _primary(read)
    assert primary["title"] in words
    assert format_value(weighed_lost_ms(primary, timing), "ms") in words  # the saving it was ranked on
    for item in primary["evidence"][:EVIDENCE_DEFAULT]:
        assert f"{item['label']}: " in words
    top = primary["callsites"][0]
    assert f"at {top['file']}:{top['line']}" in text  # on one line, never cut
    assert "What to change first" in text and primary["advice"][0]["text"] in words
    if timing.get("weighed_at_plain_step"):
        assert "findings are weighed at the plain step" in words


def test_verbose_shows_what_the_default_report_folds(read):
    from hybrid.report.notes import reading_notes

    default = _flat(render_terminal(read, color=False))
    verbose = _flat(render_terminal(read, color=False, verbose=True))
    primary = _primary(read)
    assert f"{primary['category']} {primary['title']}" in verbose and primary["category"] not in default
    why = f"why: {_flat(primary['explanation'])}"
    assert why in verbose and why not in default
    # Kernel names in a suggestion are folded mid-name at the width: compared without the white space.
    fix = re.sub(r"\s+", "", primary["suggestions"][0])
    assert fix in re.sub(r"\s+", "", verbose) and fix not in re.sub(r"\s+", "", default)
    source_line = _flat(primary["callsites"][0]["source_line"])
    assert source_line in verbose
    for cause in read["timing"]["idle_breakdown_ms"]:
        if read["timing"]["idle_breakdown_ms"][cause]:
            assert cause in verbose
    folded = [n for n in reading_notes(read) if f"{n.kind}: {_flat(n.text)}" not in default]
    assert all(f"{n.kind}: {_flat(n.text)}" in verbose for n in reading_notes(read))
    if folded:
        assert re.search(rf"\+ {len(folded)} more notes? \(--verbose\)", default)


def _changes(text: str) -> list[str]:
    """The numbered lines of the terminal's 'What to change first' (COLUMNS wide enough not to wrap)."""
    listed = text.split("What to change first", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in listed.splitlines()[1:] if re.match(r"\s*\d+\. ", line)]


def test_a_change_another_listed_change_includes_is_listed_once(monkeypatch):
    """HF Trainer in fp32: the launch-bound finding (and the heavy-ops one) ask for the reduce-overhead
    compile, the fusion finding for the default compile, which the former includes: one line, one edit, for
    all three; a received document whose `includes` is not a list renders the two lines."""
    monkeypatch.setenv("COLUMNS", "200")
    results = analyze_run_dir(FIXTURES / "verify" / "hf_trainer_tf32_paired" / "run")
    first = {f["id"]: f["advice"][0] for f in results["diagnosis"]["bottlenecks"]}
    assert first["launch.bound"]["includes"] == ["TrainingArguments(torch_compile=True)"]
    assert first["compile.fusible_elementwise"]["text"] == "TrainingArguments(torch_compile=True)"
    changes = _changes(render_terminal(results, color=False))
    compiles = [line for line in changes if "torch_compile=True" in line]
    assert compiles == [
        "2. TrainingArguments(torch_compile=True, torch_compile_mode='reduce-overhead')  (#2, #3, #6)"
    ]
    verbose = " ".join(render_terminal(results, color=False, verbose=True).split())
    assert "; it includes TrainingArguments(torch_compile=True) (why: 33 runs of 221 back-to-back" in verbose
    received = copy.deepcopy(results)
    for finding in received["diagnosis"]["bottlenecks"]:
        finding["advice"][0]["includes"] = "TrainingArguments(torch_compile=True)"
    assert (
        len([line for line in _changes(render_terminal(received, color=False)) if "torch_compile" in line])
        == 2
    )


def test_the_changes_left_out_of_the_default_report_are_counted(monkeypatch):
    """The default report lists three changes; where there are more, the heading says how many more verbose
    lists (the torchvision detector's fourth, TF32 for its FP32 GEMMs, one line to add, had left no trace).
    HF Trainer in fp32 has four."""
    monkeypatch.setenv("COLUMNS", "200")
    results = analyze_run_dir(FIXTURES / "verify" / "hf_trainer_tf32_paired" / "run")
    default = render_terminal(results, color=False)
    every = _changes(render_terminal(results, color=False, verbose=True))
    assert len(every) > 3 and len(_changes(default)) == 3
    left_out = len(every) - 3
    heading = default.split("What to change first", 1)[1].split("\n", 1)[0]
    assert (
        heading
        == f" (why each applies: --verbose; {left_out} more change{'s' if left_out > 1 else ''} there)"
    )


def test_the_larger_batch_saving_is_said_per_step_of_samples_not_per_sample():
    """A doubled batch halves the step's fixed host gaps for the samples of one step today: a figure "per
    sample" would divide by the batch (the BERT loop on the H100 read 60.2 ms a step per sample, over 20 times
    a sample's 2.9 ms). The PyG GCN's launch finding gives half its host gaps, per step's worth of samples."""
    results = analyze_run_dir(FIXTURES / "unmarked_runs" / "pyg_gcn_train" / "run")
    notes = [
        (e["label"], e["value"])
        for f in results["diagnosis"]["bottlenecks"]
        for e in f["evidence"]
        if "doubled batch" in e["label"]
    ]
    ((label, saving_ms),) = notes
    assert "per step's worth of samples" in label and "per sample" not in label
    said = [s for f in results["diagnosis"]["bottlenecks"] for s in f["suggestions"] if "doubled batch" in s]
    assert said and all(f"would save about {saving_ms:.3g} ms per step's worth of samples" in s for s in said)


def test_mixed_precision_names_narrow_data_not_tf32_beside_fp32():
    """resnet50 with TF32 (H200): its FLOPs ran tf32 94%, fp32 6%, which the roofline line called 'mixed
    precision', what a reader takes for 16-bit autocast. A bf16 autocast ViT keeps the words."""
    tf32 = render_terminal(analyze_run_dir(FIXTURES / "runs" / "h200-resnet50-default"), color=False)
    assert "Roofline: memory-bound (tf32 + fp32) ·" in tf32
    bf16 = render_terminal(analyze_run_dir(FIXTURES / "precision" / "vit_train_bf16" / "run"), color=False)
    assert re.search(r"^Roofline: \S+ \(mixed precision\)", bf16, re.MULTILINE)


def test_a_users_line_holding_under_half_its_finding_says_its_share(monkeypatch):
    """The H100 torchaudio run's DataLoader stall read "at ...:27 optimizer.step()" for 8.9% of its time, the
    rest in no line of the script. On the committed H200 capture the launch finding's first line holds 31%
    of it and says so; the stall's line 21 (the `for` over the loader) holds 83% and is said plainly."""
    monkeypatch.setenv("COLUMNS", "200")
    text = render_terminal(
        analyze_run_dir(FIXTURES / "unmarked_runs" / "torchaudio_frontend_train" / "run"), color=False
    )
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("at torchaudio")]
    assert "at torchaudio_frontend_train.py:24 (31% of it)  loss = " in "\n".join(lines)
    assert any(
        line.startswith("at torchaudio_frontend_train.py:21  for wave, label in loader") for line in lines
    )
