"""The injector end to end: real `python -m hybrid.inject.script` subprocesses on the small scripts in
tests/scripts (CPU only here), plus the session's step counting in-process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hybrid_cli import inject_argv, interruptible

import hybrid
from hybrid.errors import UsageError
from hybrid.inject.stepping import (
    HOW_TO_MARK,
    INJECT_FILE,
    MODULE_NAME_ATTR,
    TRACE_FILE,
    SessionConfig,
    StepSession,
    active_session,
    name_modules,
    outcome_of,
)
from hybrid.load.torch_trace import load_torch_trace

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "scripts"
TIMEOUT_S = 120


def _env(*extra_paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (REPO, *extra_paths))
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Scenario:
    pass_name: str
    script: str  # file in tests/scripts, or a module name with --module
    args: tuple[str, ...] = ()
    warmup: int = 1
    steps: int = 3
    flags: tuple[str, ...] = ()


# Every subprocess run of the module, started together (each spends seconds importing torch).
# RECORD in args is replaced by a per-scenario file the script writes, INJECT by its inject.json.
# --fixed-warmup where a test counts steps exactly: on a shared CPU, step times settle when they will
# (tests/test_step_detect.py covers settling).
FIXED = ("--fixed-warmup",)
SCENARIOS = {
    "optimizer": Scenario(
        "torch",
        "train_optimizer.py",
        ("--iters", "50", "--record", "RECORD", "--peek", "INJECT"),
        warmup=2,
        steps=3,
        flags=FIXED,
    ),
    "mark_step": Scenario("plain", "mark_step_loop.py", ("20",), warmup=1, steps=4, flags=FIXED),
    "module": Scenario("plain", "mark_step_loop", ("20",), warmup=0, steps=2, flags=("--module", *FIXED)),
    "never": Scenario("torch", "one_shot.py"),
    "whole_run": Scenario("torch", "never_steps.py", flags=("--whole-run",)),
    "raises": Scenario("torch", "raises.py", warmup=1, steps=5, flags=FIXED),
    "exits_7": Scenario("plain", "exits_7.py", flags=FIXED),
    "modules": Scenario(
        "nsys", "inplace_relu_modules.py", ("RECORD",), warmup=1, steps=2, flags=("--nvtx-modules", *FIXED)
    ),
}


@dataclass
class Run:
    proc: subprocess.CompletedProcess
    inject: dict | None
    out: Path
    cwd: Path
    record: dict | None


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    started = {}
    for name, scenario in SCENARIOS.items():
        base = tmp_path_factory.mktemp(name)
        cwd = base / "elsewhere"  # the script's cwd, unlike its own directory
        cwd.mkdir()
        record = base / "record.json"
        as_module = "--module" in scenario.flags
        target = scenario.script if as_module else str(SCRIPTS / scenario.script)
        inject_path = base / scenario.pass_name / INJECT_FILE
        args = [{"RECORD": str(record), "INJECT": str(inject_path)}.get(a, a) for a in scenario.args]
        argv = inject_argv(
            base / scenario.pass_name,
            scenario.pass_name,
            target,
            *args,
            warmup=scenario.warmup,
            steps=scenario.steps,
            flags=scenario.flags,
        )
        env = _env(*((SCRIPTS,) if as_module else ()))
        child = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        started[name] = (child, argv, base / scenario.pass_name, cwd, record)
    results = {}
    for name, (child, argv, out, cwd, record) in started.items():
        stdout, stderr = child.communicate(timeout=TIMEOUT_S)
        inject_path = out / INJECT_FILE
        results[name] = Run(
            proc=subprocess.CompletedProcess(argv, child.returncode, stdout, stderr),
            inject=json.loads(inject_path.read_text()) if inject_path.exists() else None,
            out=out,
            cwd=cwd,
            record=json.loads(record.read_text()) if record.exists() else None,
        )
    return results


# -- optimizer loop: steps found by the hook, stopped at the limit --------------------------------


def test_step_limit_stops_the_script_with_status_zero(runs):
    run = runs["optimizer"]
    inject = run.inject
    assert run.proc.returncode == 0, run.proc.stderr
    assert inject["outcome"] == "step_limit" and inject["exit_code"] == 0
    assert inject["step_source"] == "optimizer_hook"
    assert (inject["steps_seen"], inject["warmup_steps"], inject["measured_steps"]) == (5, 2, 3)
    # The 5th optimizer.step() raised the stop: the loop body never finished that iteration, and
    # the script's `except Exception` did not swallow it, while its finally-block still ran.
    assert run.record["iters_done"] == 4
    assert "swallowed" not in run.record
    assert run.record["peeked_exists"] is True  # inject.json was written before the script was stopped
    assert "[hybrid] torch step 3/3" in run.proc.stdout


def test_window_timing_is_consistent(runs):
    inject = runs["optimizer"].inject
    ends = inject["step_end_ns"]
    assert len(ends) == 3 and ends == sorted(ends) and ends[0] > 0
    assert inject["window_ns"] == ends[-1]
    assert inject["step_time_ms"] == pytest.approx(inject["window_ns"] / 3 / 1e6)
    assert inject["unprofiled_steps"] == 1  # warmup steps after the first
    assert inject["unprofiled_step_time_ms"] > 0
    assert inject["cuda_available"] is torch.cuda.is_available()
    assert inject["torch_version"] == torch.__version__
    assert inject["graph_breaks"] == [] and inject["batch_size"] is None


def test_argv_cwd_and_sys_path_are_the_scripts(runs):
    run = runs["optimizer"]
    script = str(SCRIPTS / "train_optimizer.py")
    assert run.record["argv"] == [
        script,
        "--iters",
        "50",
        "--record",
        run.record["argv"][4],
        "--peek",
        str(run.out / INJECT_FILE),
    ]
    assert run.record["cwd"] == str(run.cwd)
    assert run.record["sys_path0"] == str(SCRIPTS)


def test_torch_pass_trace_has_the_measured_steps(runs):
    run = runs["optimizer"]
    assert run.inject["trace"] == TRACE_FILE
    profile = load_torch_trace(run.out / TRACE_FILE)
    assert list(profile.steps["step"]) == [0, 1, 2]
    assert profile.step_source == "torch:annotation"
    # The hook ends a step right after optimizer.step(): each step range holds exactly one SGD
    # update (torch's own `Optimizer.step#SGD.step` annotation) and two Linear forwards.
    raw = json.loads((run.out / TRACE_FILE).read_text())["traceEvents"]
    updates = [e["ts"] * 1000 for e in raw if e.get("name", "").startswith("Optimizer.step#SGD")]
    for start, end in zip(profile.steps["start_ns"], profile.steps["end_ns"], strict=False):
        assert sum(start <= t <= end for t in updates) == 1
    addmm = profile.ops[profile.ops["name"] == "aten::addmm"]
    assert addmm.groupby("step").size().to_dict() == {0: 2, 1: 2, 2: 2}


# -- explicit marks ---------------------------------------------------------------------------------


def test_mark_step_and_step_context_count_steps(runs):
    run = runs["mark_step"]
    inject = run.inject
    assert run.proc.returncode == 0, run.proc.stderr
    assert inject["outcome"] == "step_limit" and inject["step_source"] == "mark_step"
    assert (inject["steps_seen"], inject["measured_steps"]) == (5, 4)
    assert inject["batch_size"] == 8
    assert inject["trace"] is None  # the plain pass runs no collector
    assert "finished all iterations" not in run.proc.stdout


def test_script_runs_unchanged_without_hybrid(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "mark_step_loop.py"), "6"],
        check=False,
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert "finished all iterations" in proc.stdout
    assert not list(tmp_path.iterdir())


def test_module_target_keeps_its_arguments(runs):
    run = runs["module"]
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.inject["outcome"] == "step_limit" and run.inject["measured_steps"] == 2
    assert run.inject["unprofiled_steps"] == 0 and run.inject["unprofiled_step_time_ms"] is None


# -- scripts that never step ----------------------------------------------------------------------


def test_never_stepping_script_says_so(runs):
    run = runs["never"]
    inject = run.inject
    assert run.proc.returncode == 0, run.proc.stderr
    assert inject["outcome"] == "completed"
    assert (inject["steps_seen"], inject["measured_steps"], inject["step_source"]) == (0, 0, "none")
    assert inject["window_ns"] is None and inject["step_time_ms"] is None
    assert any("hybrid.mark_step()" in w and "with hybrid.step():" in w for w in inject["warnings"])
    assert not (run.out / TRACE_FILE).exists()


def test_whole_run_captures_the_script_as_one_step(runs):
    run = runs["whole_run"]
    inject = run.inject
    assert run.proc.returncode == 0, run.proc.stderr
    assert "done" in run.proc.stdout
    assert inject["outcome"] == "completed" and inject["whole_run"] is True
    assert (inject["measured_steps"], inject["step_source"]) == (1, "none")
    assert HOW_TO_MARK in inject["warnings"]
    profile = load_torch_trace(run.out / TRACE_FILE)
    assert list(profile.steps["name"]) == ["ProfilerStep#0"]
    # all five matmuls of the script fall in that one step
    assert (profile.ops[profile.ops["name"] == "aten::mm"]["step"] == 0).sum() == 5


# -- how scripts end --------------------------------------------------------------------------------


def test_exception_exits_1_with_the_scripts_traceback(runs):
    run = runs["raises"]
    inject, stderr = run.inject, run.proc.stderr
    assert run.proc.returncode == 1
    assert "ValueError: planted failure after two steps" in stderr
    assert "runpy" not in stderr and "hybrid/inject/script.py" not in stderr  # starts in the user's code
    assert inject["outcome"] == "exception" and inject["exit_code"] == 1
    assert "ValueError: planted failure" in inject["traceback"]
    assert (inject["steps_seen"], inject["measured_steps"]) == (2, 1)
    assert any("1 of 5 measured steps" in w for w in inject["warnings"])
    assert inject["cut_short_step"] == 1
    # the collector was stopped and its trace kept, with the one complete step only
    assert list(load_torch_trace(run.out / TRACE_FILE).steps["step"]) == [0]


def test_sys_exit_code_is_preserved(runs):
    run = runs["exits_7"]
    assert run.proc.returncode == 7
    assert "finally ran" in run.proc.stdout
    assert run.inject["outcome"] == "completed" and run.inject["exit_code"] == 7
    assert run.inject["traceback"] is None
    assert run.inject["steps_seen"] == 1


def test_ctrl_c_exits_130_and_is_recorded(tmp_path):
    out = tmp_path / "plain"
    child = subprocess.Popen(
        interruptible(inject_argv(out, "plain", str(SCRIPTS / "waits_for_interrupt.py"))),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=TIMEOUT_S) == 130
    finally:
        child.kill()
        child.communicate()
    inject = json.loads((out / INJECT_FILE).read_text())
    assert inject["outcome"] == "interrupted" and inject["exit_code"] == 130


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--pass", "torch", "--out", "OUT"], "no target"),
        (["--pass", "bogus", "--out", "OUT", "--", "x.py"], "invalid choice"),
        (["--pass", "torch", "--out", "OUT", "--", "does_not_exist.py"], "not found"),
        (
            ["--pass", "torch", "--out", "OUT", "--steps", "0", "--", str(SCRIPTS / "never_steps.py")],
            "bad step counts",
        ),
    ],
)
def test_usage_errors_exit_2(tmp_path, argv, message):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", "hybrid.inject.script", *argv],
        check=False,
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (tmp_path / "out" / INJECT_FILE).exists()


def test_injector_imports_neither_pandas_nor_torch_at_import(tmp_path):
    code = "import sys, hybrid.inject.script; print(sorted({'pandas', 'torch'} & set(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_module_ranges_pass_with_inplace_relu(runs):
    """--nvtx-modules installs forward-only hooks: ReLU(inplace=True) on module outputs trains through
    them, and modules get their qualified names. (No NVTX consumer here: what nsys records is a GPU test.)"""
    run = runs["modules"]
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.inject["outcome"] == "step_limit" and run.inject["measured_steps"] == 2
    assert run.inject["nvtx_domains"] is True  # the nvtx package is installed: ranges carry their domain
    assert run.record["conv1_name"] == "2.0.conv1"


# -- the session in-process -------------------------------------------------------------------------


def _sgd_model():
    model = torch.nn.Linear(8, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_explicit_marks_win_over_the_optimizer_hook(tmp_path):
    model, optimizer = _sgd_model()
    with StepSession(SessionConfig("plain", tmp_path, warmup_steps=1, measured_steps=3)) as session:
        for _ in range(10):
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
            hybrid.mark_step()  # same step as the hook's: counted once
    assert session.steps_seen == 4 and len(session.step_end_ns) == 3
    assert session.step_source == "mark_step"
    assert json.loads((tmp_path / INJECT_FILE).read_text())["outcome"] == "step_limit"
    assert active_session() is None


def test_step_context_does_not_count_a_failed_step(tmp_path):
    with StepSession(SessionConfig("plain", tmp_path, warmup_steps=0, measured_steps=5)) as session:
        with hybrid.step():
            pass
        with pytest.raises(RuntimeError), hybrid.step():
            raise RuntimeError("step failed")
    assert session.steps_seen == 1
    result = json.loads((tmp_path / INJECT_FILE).read_text())
    assert result["outcome"] == "completed" and result["measured_steps"] == 1


def test_functions_are_no_ops_outside_a_session(tmp_path):
    model, optimizer = _sgd_model()
    assert active_session() is None
    hybrid.mark_step()
    hybrid.set_batch_size(4)
    with hybrid.step():
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()  # no hook is left installed by earlier sessions
    assert active_session() is None
    assert not list(tmp_path.iterdir())


def test_one_session_at_a_time(tmp_path):
    with (
        StepSession(SessionConfig("plain", tmp_path / "a", measured_steps=2)),
        pytest.raises(UsageError, match="already active"),
    ):
        StepSession(SessionConfig("plain", tmp_path / "b")).begin()


def test_name_modules_uses_qualified_names():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU()))
    name_modules(model)
    assert model.__dict__[MODULE_NAME_ATTR] == "Sequential"
    assert model[0].__dict__[MODULE_NAME_ATTR] == "0"
    assert model[1][0].__dict__[MODULE_NAME_ATTR] == "1.0"


@pytest.mark.parametrize(
    "ending, expected",
    [
        (None, ("completed", 0)),
        (SystemExit(None), ("completed", 0)),
        (SystemExit(7), ("completed", 7)),
        (SystemExit("bad config"), ("completed", 1)),
        (KeyboardInterrupt(), ("interrupted", 130)),
        (ValueError("x"), ("exception", 1)),
    ],
)
def test_outcome_of_follows_python_exit_rules(ending, expected):
    assert outcome_of(ending)[:2] == expected
