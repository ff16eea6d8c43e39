"""End-to-end CLI tests on the CPU: real `python -m hybrid` subprocesses on real scripts."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hybrid_cli import hybrid_env, interruptible
from hybrid_cli import run_hybrid as hybrid

from hybrid.collect.orchestrate import SHORT_PLAIN_STEPS
from hybrid.schema import missing_keys

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"


@pytest.fixture(scope="module")
def script_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """One real `hybrid run` of a small training script, shared by the tests that read its outputs."""
    base = tmp_path_factory.mktemp("run")
    out, record = base / "run", base / "record.json"
    done = hybrid(
        "run",
        "--steps",
        "4",
        "--warmup",
        "2",
        "--out",
        str(out),
        "--json",
        str(SCRIPTS / "train_optimizer.py"),
        "--iters",
        "40",
        "--record",
        str(record),
    )
    return done, out, record


def test_run_writes_a_valid_results_document(script_run):
    done, out, record = script_run
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert missing_keys(results) == []
    assert results == json.loads((out / "results.json").read_text())
    assert results["mode"] == "cpu-only"
    assert results["workload"]["steps_measured"] == 4
    # At least the 2 requested warmup steps, more until step times settled (at most 10 more).
    warmup = results["workload"]["warmup_steps"]
    assert 2 <= warmup <= 12 and results["workload"]["warmup_reason"].startswith(f"{warmup} warmup steps")
    assert (results["workload"]["step_source"], results["workload"]["step_confidence"]) == (
        "optimizer_hook",
        "high",
    )
    # The script was stopped after warmup + measured steps, and saw its own argv.
    recorded = json.loads(record.read_text())
    assert recorded["argv"][1:] == ["--iters", "40", "--record", str(record)]
    # warmup + the plain window (the reference for the torch pass's slowdown, on CPU-only runs too) + 4
    # measured steps: the stop is raised from the last optimizer.step(), before the script counts it.
    plain = next(p for p in results["passes"] if p["name"] == "plain")
    assert plain["process"] == "torch" and plain["step_time_ms"] > 0
    assert recorded["iters_done"] == warmup + SHORT_PLAIN_STEPS + 4 - 1
    for artifact in ("run.json", "report.txt", "torch/trace.json", "torch/inject.json", "torch/console.log"):
        assert (out / artifact).is_file(), artifact


def test_cpu_only_run_says_gpu_analysis_was_not_possible(script_run):
    _done, out, _record = script_run
    results = json.loads((out / "results.json").read_text())
    text = " ".join(results["limitations"] + results["warnings"]).lower()
    assert "gpu" in text and "not possible" in text


def test_report_reanalyzes_a_run_directory_offline(script_run):
    _done, out, _record = script_run
    first = json.loads((out / "results.json").read_text())
    again = hybrid("report", str(out), "--json")
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["diagnosis"] == first["diagnosis"]
    assert second["timing"] == first["timing"]


def test_terminal_report_is_plain_without_a_tty(script_run):
    _done, out, _record = script_run
    shown = hybrid("report", str(out))
    assert shown.returncode == 0, shown.stderr
    assert "\x1b[" not in shown.stdout
    assert "step" in shown.stdout.lower()


@pytest.mark.slow
def test_diagnose_simple_cnn_on_cpu(tmp_path):
    done = hybrid(
        "diagnose",
        "--model",
        "simple_cnn",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--out",
        str(tmp_path / "r"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert missing_keys(results) == []
    assert results["workload"]["steps_measured"] == 3
    # Only what was shrunk is said: the steps and warmup given stand.
    (said,) = [line for line in done.stderr.splitlines() if "GPU analysis is not possible" in line]
    assert "batch_size=" in said and "steps=" not in said and "warmup" not in said


def test_doctor_reports_tools_and_mode():
    done = hybrid("doctor", "--json")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert facts["torch"]
    if not facts["cuda_available"]:
        assert facts["mode"] == "cpu-only"
    plain = hybrid("doctor")
    assert "would use" in plain.stdout


def test_profile_model_api_returns_results(tmp_path):
    import torch

    from hybrid import profile_model

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    results = profile_model(
        model, lambda: torch.randn(8, 16), steps=3, warmup=1, optimizer=optimizer, out_dir=tmp_path / "api"
    )
    assert missing_keys(results) == []
    assert results["workload"]["steps_measured"] == 3
    assert "bottlenecks" in results["diagnosis"] and "primary_bottleneck" in results["diagnosis"]


# -- bad input: a clear message, a documented exit code, nothing lost ------------------------------------


def test_missing_script_is_a_usage_error(tmp_path):
    done = hybrid("run", "--out", str(tmp_path / "r"), str(tmp_path / "nope.py"))
    assert done.returncode == 2
    assert "script not found" in done.stderr and "fix:" in done.stderr


def test_raising_script_exits_3_with_its_traceback_and_keeps_the_run(tmp_path):
    out = tmp_path / "r"
    done = hybrid("run", "--steps", "5", "--warmup", "0", "--out", str(out), str(SCRIPTS / "raises.py"))
    assert done.returncode == 3
    assert "planted failure after two steps" in done.stderr
    assert "ValueError" in done.stderr
    inject = json.loads((out / "torch" / "inject.json").read_text())
    assert inject["outcome"] == "exception"
    assert json.loads((out / "run.json").read_text())["passes"][0]["status"] == "failed"


def test_unknown_model_is_a_usage_error():
    done = hybrid("diagnose", "--model", "vgg_nope")
    assert done.returncode == 2
    assert "unknown model" in done.stderr and "resnet50" in done.stderr


@pytest.mark.parametrize("steps", ["0", "-3"])
def test_nonpositive_steps_is_a_usage_error(tmp_path, steps):
    done = hybrid("run", "--steps", steps, "--out", str(tmp_path / "r"), str(SCRIPTS / "never_steps.py"))
    assert done.returncode == 2
    assert "--steps must be at least 1" in done.stderr


def test_unwritable_output_directory_is_a_usage_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = hybrid("run", "--out", str(blocker / "run"), str(SCRIPTS / "never_steps.py"))
    assert done.returncode == 2
    assert "cannot write the run directory" in done.stderr and "--out" in done.stderr


def test_corrupt_trace_in_report_is_an_input_error(tmp_path):
    run = tmp_path / "r"
    (run / "torch").mkdir(parents=True)
    (run / "torch" / "trace.json").write_text('{"traceEvents": [')
    done = hybrid("report", str(run))
    assert done.returncode == 2
    assert "trace.json" in done.stderr and "fix:" in done.stderr


def test_foreign_trace_in_report_is_an_input_error(tmp_path):
    run = tmp_path / "r"
    (run / "torch").mkdir(parents=True)
    (run / "torch" / "trace.json").write_text(json.dumps({"hello": "not a trace"}))
    done = hybrid("report", str(run))
    assert done.returncode == 2
    assert "fix:" in done.stderr


def test_report_on_a_folder_without_artifacts(tmp_path):
    done = hybrid("report", str(tmp_path))
    assert done.returncode == 2
    assert "neither" in done.stderr


def test_a_script_with_no_step_is_not_run_again(tmp_path):
    """No step found and no nsys to capture a timeline: exit 4 with the cause and the fix; the script ran
    once (its side effects happened once), and the run directory keeps what it gathered."""
    out, marker = tmp_path / "r", tmp_path / "runs.txt"
    script = tmp_path / "no_step.py"
    script.write_text(
        "import sys, torch\n"
        f"open({str(marker)!r}, 'a').write('ran\\n')\n"
        "print(float((torch.randn(64, 64) @ torch.randn(64, 64)).sum()))\n"
    )
    done = hybrid("run", "--mode", "torch", "--out", str(out), str(script))
    assert done.returncode == 4, done.stderr
    assert "no step was found" in done.stderr and "does not re-run the script" in done.stderr
    assert "hybrid.mark_step()" in done.stderr and "--whole-run" in done.stderr
    assert marker.read_text() == "ran\n"
    assert (out / "torch" / "inject.json").exists()


@pytest.mark.slow
def test_a_script_that_ends_before_its_steps_settle_is_measured_on_its_last_steps(tmp_path):
    """Warmup waits for step times to settle; a script of 8 ever-longer steps ends first. Its length is
    then known: the torch pass runs again, dropping exactly 5 steps, and measures the last 3."""
    out = tmp_path / "r"
    done = hybrid(
        "run",
        "--mode",
        "torch",
        "--warmup",
        "1",
        "--steps",
        "3",
        "--out",
        str(out),
        "--json",
        str(SCRIPTS / "never_settles.py"),
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    workload = results["workload"]
    assert (workload["steps_measured"], workload["warmup_steps"]) == (3, 5)
    assert "the script ran 8 steps" in workload["warmup_reason"]
    # The last three sleeps are 38, 57 and 85 ms: their mean, not the first steps' 5-17 ms.
    assert 55 < results["timing"]["step_time_ms"] < 120
    inject = json.loads((out / "torch" / "inject.json").read_text())
    assert inject["warmup_steps"] == 5 and inject["measured_steps"] == 3


@pytest.mark.slow
def test_whole_run_is_asked_for_explicitly(tmp_path):
    out = tmp_path / "r"
    done = hybrid(
        "run", "--whole-run", "--mode", "torch", "--out", str(out), "--json", str(SCRIPTS / "one_shot.py")
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["workload"]["steps_measured"] == 1
    assert any("hybrid.mark_step()" in w for w in results["warnings"])


@pytest.mark.slow
def test_an_unmarked_loop_reports_its_step_unit(tmp_path):
    out = tmp_path / "r"
    done = hybrid(
        "run",
        "--mode",
        "torch",
        "--warmup",
        "2",
        "--steps",
        "4",
        "--out",
        str(out),
        str(SCRIPTS / "unmarked" / "nested_loops.py"),
    )
    assert done.returncode == 0, done.stderr
    assert (
        "step = one iteration of the loop at nested_loops.py:11 · detected (the script's loop)"
        in " ".join(done.stdout.split())
    )
    results = json.loads((out / "results.json").read_text())
    workload = results["workload"]
    assert (workload["step_source"], workload["step_confidence"], workload["step_ranges"]) == (
        "script_loop",
        "medium",
        "torch:annotation",
    )
    assert workload["steps_measured"] == 4 and workload["warmup_steps"] >= 2
    assert workload["warmup_reason"].startswith(f"{workload['warmup_steps']} warmup steps dropped")


@pytest.mark.slow
def test_ctrl_c_keeps_the_partial_run(tmp_path):
    out = tmp_path / "r"
    slow = tmp_path / "slow.py"
    slow.write_text(
        "import time, torch\n"
        "m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for i in range(10_000):\n"
        "    m(torch.randn(2, 4)).sum().backward(); o.step(); time.sleep(0.05)\n"
    )
    env = hybrid_env()
    proc = subprocess.Popen(
        interruptible(
            [
                sys.executable,
                "-m",
                "hybrid",
                "run",
                "--steps",
                "5000",
                "--warmup",
                "1",
                "--out",
                str(out),
                str(slow),
            ]
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    # Into its measured steps: the injector has printed a measured step (on a loaded CI box the
    # script's imports alone can take longer than any fixed sleep).
    log, deadline = out / "torch" / "console.log", time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and "[hybrid] torch step" in log.read_text()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted" in stderr and str(out) in stderr
    inject = json.loads((out / "torch" / "inject.json").read_text())
    assert inject["outcome"] == "interrupted"
    passes = json.loads((out / "run.json").read_text())["passes"]
    assert passes[-1]["status"] == "interrupted"


# -- a real H200 run directory (tests/fixtures/runs/h200-simple_cnn), re-analyzed offline -----------------

H200_RUN = ROOT / "tests" / "fixtures" / "runs" / "h200-simple_cnn"


@pytest.fixture()
def h200_run(tmp_path) -> Path:
    import shutil

    copy = tmp_path / "h200-simple_cnn"
    shutil.copytree(H200_RUN, copy)  # the committed capture stays as captured whatever a test does
    return copy


@pytest.fixture(scope="module")
def h200_report(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """One `hybrid report --json --out` of a copy of the H200 run: its document is read by the tests below
    (each `hybrid report` of it takes 3 s of CPU)."""
    base = tmp_path_factory.mktemp("h200-report")
    run, report = base / H200_RUN.name, base / "report"
    shutil.copytree(H200_RUN, run)
    return hybrid("report", str(run), "--json", "--out", str(report)), run, report


def test_report_on_a_real_h200_run_directory(h200_report):
    done, h200_run, report = h200_report
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert missing_keys(results) == []
    assert results["mode"] == "hybrid"
    assert results["device"]["name"] == "NVIDIA H200"
    assert results["workload"]["steps_measured"] == 50
    assert (results["workload"]["step_source"], results["workload"]["step_ranges"]) == (
        "optimizer_hook",
        "nvtx:hybrid",
    )
    sources = {m["source"] for m in results["metrics"].values()}
    assert {"measured:torch", "measured:nsys", "measured:ncu"} <= sources
    assert results["diagnosis"]["primary_bottleneck"] is not None
    # Written to the folder named, never into the run directory it read.
    assert (report / "results.json").is_file() and (report / "report.txt").is_file()
    assert not (h200_run / "results.json").exists() and not (h200_run / "report.txt").exists()


def test_fail_on_gates_ci_on_a_real_run(h200_report, h200_run):
    results = json.loads(h200_report[0].stdout)
    worst = max(
        (
            {"CRITICAL": 3, "SEVERE": 2, "MODERATE": 1, "LOW": 0}[f["severity"]]
            for f in results["diagnosis"]["bottlenecks"]
            if not f.get("not_measured")
        ),
        default=-1,
    )
    assert worst >= 0, "the fixture should have at least one measured finding"
    assert hybrid("report", str(h200_run), "--fail-on", "LOW").returncode == 1
    above = [s for s, rank in {"CRITICAL": 3, "SEVERE": 2, "MODERATE": 1}.items() if rank > worst]
    for severity in above:
        assert hybrid("report", str(h200_run), "--fail-on", severity).returncode == 0


def test_html_report_from_saved_artifacts(h200_run, tmp_path):
    done = hybrid("report", str(h200_run), "--html", "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "report" / "report.html").read_text()
    assert "<svg" in page and "NVIDIA H200" in page
    assert "/tmp/hybrid-gpu-runs" not in page  # no absolute paths of the profiled machine


def test_compare_gates_on_step_time_regression(tmp_path):
    before = json.loads((ROOT / "tests" / "fixtures" / "results" / "h200_resnet50.json").read_text())
    after = json.loads(json.dumps(before))
    after["timing"]["step_time_ms"] = before["timing"]["step_time_ms"] * 1.2
    (tmp_path / "a.json").write_text(json.dumps(before))
    (tmp_path / "b.json").write_text(json.dumps(after))
    same = hybrid("compare", str(tmp_path / "a.json"), str(tmp_path / "a.json"), "--fail-on-regression", "5")
    assert same.returncode == 0, same.stderr
    worse = hybrid(
        "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--fail-on-regression", "10"
    )
    assert worse.returncode == 1
    assert "+20%" in worse.stdout and "regression gate failed" in worse.stderr
    diff = json.loads(hybrid("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json").stdout)
    assert diff["step_time_ms"]["delta_pct"] == pytest.approx(20.0)
    missing = hybrid("compare", str(tmp_path / "nope"), str(tmp_path / "b.json"))
    assert missing.returncode == 2 and "not found" in missing.stderr


PROBE_EXPORT = ROOT / "tests" / "fixtures" / "h200-probe" / "nsys_matmul_copy.sqlite"


def test_report_on_a_users_own_export_with_step_range():
    done = hybrid("report", str(PROBE_EXPORT), "--step-range", "step", "--json")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["mode"] == "nsys"
    assert results["workload"]["steps_measured"] == 5
    assert results["workload"]["step_source"].startswith("nvtx:")
    assert results["diagnosis"]["primary_bottleneck"]["category"] == "DATA_PIPELINE"  # 32 MiB pageable HtoD


def test_export_without_kernels_is_an_input_error(tmp_path):
    import sqlite3

    export = tmp_path / "no_kernels.sqlite"
    shutil.copy(PROBE_EXPORT, export)
    with sqlite3.connect(export) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    done = hybrid("report", str(export))
    assert done.returncode == 2
    assert "holds no kernels" in done.stderr and "fix:" in done.stderr
