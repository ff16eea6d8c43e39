"""A script that runs its own torch profiler, under `hybrid run` (real CPU subprocesses of
tests/scripts/own_profilers.py, one per profiler form): hybrid steps on the script's loop once, keeps
its own torch pass the only collector, writes none of the script's trace files, and says what it did
with the script's profiler in inject.json, results.json and the printed report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "scripts" / "own_profilers.py"
STEP_S = 0.004  # own_profilers.STEP_S: every step sleeps this long
STEPS = 5
FORMS = ("schedule", "no_schedule", "start_stop", "legacy", "record_only")
# The forms `make test` runs: a scheduled and an unscheduled profiler stepping the loop, and one stopped
# part-way whose export is held back; the legacy autograd profiler and the script without one run in
# `make test-slow` (each form is a `hybrid run` of its own).
SLOW_FORMS = ("legacy", "record_only")


# The forms each test that is not parametrized by form reads.
READS = {
    "test_the_scripts_trace_handler_never_ran": ("schedule",),
    "test_marks_follow_the_profiler_then_the_optimizer": ("schedule", "no_schedule", "start_stop"),
    "test_a_script_without_a_profiler_gets_no_note": ("record_only",),
}


def _forms(forms: tuple[str, ...]) -> list:
    return [pytest.param(f, marks=pytest.mark.slow) if f in SLOW_FORMS else f for f in forms]


KINDS = {
    "schedule": "torch.profiler.profile",
    "no_schedule": "torch.profiler.profile",
    "start_stop": "torch.profiler.profile",
    "legacy": "torch.autograd.profiler.profile",
}
USER_TRACE = "precious: the user's own trace from an earlier run\n"
TIMEOUT_S = 400  # five runs start together on a shared 2-core box; each imports torch twice


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> dict[str, dict]:
    """One `hybrid run` per form the selected tests of this file read (all at once)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", NO_COLOR="1", COLUMNS="200")
    selected = [item for item in request.session.items if item.path == request.node.path]
    wanted = {form for item in selected for form in READS.get(item.originalname, ())}
    wanted |= {item.callspec.params["form"] for item in selected if hasattr(item, "callspec")}
    started = {}
    for form in [f for f in FORMS if f in wanted]:
        cwd = tmp_path_factory.mktemp(form)
        (cwd / "user_trace.json").write_text(USER_TRACE)
        argv = [sys.executable, "-m", "hybrid", "run", "--mode", "torch", "--steps", str(STEPS), "--warmup"]
        argv += ["2", "-o", "run", str(SCRIPT), form]
        started[form] = (
            subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ),
            cwd,
        )
    results = {}
    for form, (child, cwd) in started.items():
        stdout, stderr = child.communicate(timeout=TIMEOUT_S)
        results[form] = {"cwd": cwd, "stdout": stdout, "stderr": stderr, "returncode": child.returncode}
        run = cwd / "run"
        if child.returncode == 0:
            results[form] |= {
                "results": json.loads((run / "results.json").read_text()),
                "inject": json.loads((run / "torch" / "inject.json").read_text()),
                "trace": json.loads((run / "torch" / "trace.json").read_text()),
                "run_json": json.loads((run / "run.json").read_text()),
            }
    return results


def _run(runs: dict[str, dict], form: str) -> dict:
    run = runs[form]
    assert run["returncode"] == 0, f"{form}: {run['stderr']}"
    return run


@pytest.mark.parametrize("form", _forms(FORMS))
def test_the_loop_is_stepped_once_at_its_own_pace(runs, form):
    """One step series of the requested length, each step at least the script's own sleep: the
    script's ProfilerStep ranges beside hybrid's would halve it (issue 27: 39 steps of 536 us instead
    of 20 of ~1 ms)."""
    run = _run(runs, form)
    workload, timing = run["results"]["workload"], run["results"]["timing"]
    assert workload["steps_measured"] == STEPS
    events = run["trace"]["traceEvents"]
    step_ranges = Counter(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    assert sorted(step_ranges) == [f"ProfilerStep#{i}" for i in range(STEPS)]
    assert set(step_ranges.values()) == {1}
    assert timing["step_time_ms"] >= STEP_S * 1e3
    # The plain window (no collector) times the same loop: the script's profiler was not running there
    # either, or a no-schedule profiler would record every operator.
    assert timing["baseline_step_time_ms"] >= STEP_S * 1e3
    # The script's record_function ranges stay annotations in hybrid's trace, one per measured step.
    assert Counter(e["name"] for e in events)["user/forward"] == STEPS


@pytest.mark.parametrize("form", _forms(tuple(f for f in FORMS if f != "record_only")))
def test_the_scripts_profiler_is_kept_inert_and_said(runs, form):
    run = _run(runs, form)
    (profiler,) = run["inject"]["user_profilers"]
    assert profiler["kind"] == KINDS[form]
    # The site is the script's own line that started the profiler.
    file, line = profiler["site"].rsplit(":", 1)
    assert file == SCRIPT.name
    assert re.search(r"profile\(|\.start\(\)", SCRIPT.read_text().splitlines()[int(line) - 1])
    notes = [w for w in run["results"]["warnings"] if "kept inert" in w]
    assert len(notes) == 1 and notes[0].startswith(f"your {KINDS[form]} at {profiler['site']}")
    printed = " ".join(run["stdout"].split())  # the terminal wraps long lines
    assert f"your {KINDS[form]} at {profiler['site']}" in printed and "kept inert" in printed
    # run.json's torch pass keeps the record too, for whoever reads the run directory and not the report.
    (torch_pass,) = [p for p in run["run_json"]["passes"] if p["name"] == "torch"]
    assert torch_pass["user_profilers"] == run["inject"]["user_profilers"]


def test_the_scripts_trace_handler_never_ran(runs):
    # Its on_trace_ready handler (a tensorboard_trace_handler into tb/) never ran.
    schedule = _run(runs, "schedule")
    assert schedule["inject"]["user_profilers"][0]["trace_handler"]
    assert not (schedule["cwd"] / "tb").exists()


@pytest.mark.parametrize("form", _forms(("start_stop", "legacy")))
def test_the_scripts_trace_files_are_never_written(runs, form):
    # Its export_chrome_trace and key_averages() ran, after its profiled steps, during hybrid's warmup:
    # the export wrote nothing over the file of an earlier run, and the script went on.
    run = _run(runs, form)
    assert run["inject"]["user_profilers"][0]["exports_skipped"] == ["user_trace.json"]
    assert (run["cwd"] / "user_trace.json").read_text() == USER_TRACE
    assert "left as it was" in " ".join(run["stdout"].split())


def test_marks_follow_the_profiler_then_the_optimizer(runs):
    """Profiler step() calls mark the steps while it runs; a script that stops profiling and trains on
    is counted by its optimizer from there."""
    assert _run(runs, "schedule")["results"]["workload"]["step_source"] == "profiler_step"
    assert _run(runs, "no_schedule")["results"]["workload"]["step_source"] == "profiler_step"
    start_stop = _run(runs, "start_stop")
    assert start_stop["inject"]["user_profilers"][0]["steps"] == 4  # own_profilers.PROFILED
    assert start_stop["results"]["workload"]["step_source"] == "optimizer_hook"


@pytest.mark.slow
def test_a_script_without_a_profiler_gets_no_note(runs):
    run = _run(runs, "record_only")
    assert run["inject"]["user_profilers"] == []
    assert not [w for w in run["results"]["warnings"] if "kept inert" in w]
