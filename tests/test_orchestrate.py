"""The exact argv `hybrid run` sends to nsys and ncu, with the subprocess call patched (no GPU here).

The patched process only leaves behind what the real one would (inject.json, the export, the CSV),
copied from a real H200 run directory, so the orchestrator walks its real path: torch pass, nsys
pass, kernel selection from the export, ncu pass."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest

from hybrid.collect import ncu_tool as ncu
from hybrid.collect import nsys_tool as nsys
from hybrid.collect import orchestrate
from hybrid.collect.orchestrate import Orchestrator, RunOptions, Target
from hybrid.errors import ProfilerError, WorkloadError
from nsight.ncu import kernel_name_filter

ROOT = Path(__file__).resolve().parent.parent
H200_RUN = ROOT / "tests" / "fixtures" / "runs" / "h200-simple_cnn"
NSYS = Path("/opt/nvidia/nsight-systems/2025.3.1/bin/nsys")
NCU = Path("/opt/nvidia/nsight-compute/2025.3.1/ncu")
# `nsys profile --help` of the H200 box's nsys 2025.3.1 (GPU call A, session 3).
NSYS_HELP = (ROOT / "tests" / "fixtures" / "callsites" / "h200_nsys_2025.3.1_profile_help.txt").read_text()


class FakeProcess:
    """Stands in for Popen: records argv and leaves the artifacts of the pass it was asked to run."""

    calls: ClassVar[list[list[str]]] = []
    exports: ClassVar[list[Path]] = []

    def __init__(self, argv, **_kwargs) -> None:
        FakeProcess.calls.append(list(argv))
        self.pid = 0
        self.stdout = io.StringIO("[hybrid] step 1/3\n")
        inner = argv[argv.index("hybrid.inject.script") :]
        pass_name = inner[inner.index("--pass") + 1]
        out = Path(inner[inner.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        inject = (
            json.loads((H200_RUN / pass_name / "inject.json").read_text()) if pass_name != "plain" else {}
        )
        measured = int(inner[inner.index("--steps") + 1])
        inject.update(
            outcome="step_limit",
            exit_code=0,
            cuda_available=True,
            measured_steps=measured,
            steps_seen=4 + measured,
            warmup_dropped=4,
        )
        if "--plain-steps" in inner:
            # The real injector times these steps before torch.profiler starts (tests/test_cost_windows.py).
            plain = int(inner[inner.index("--plain-steps") + 1])
            inject["plain_window"] = {
                "requested_steps": plain,
                "measured_steps": plain,
                "complete": True,
                "step_end_ns": [2_000_000 * (i + 1) for i in range(plain)],
                "window_ns": 2_000_000 * plain,
                "step_time_ms": 2.0,
            }
            inject["steps_seen"] += plain
        (out / "inject.json").write_text(json.dumps(inject))
        if pass_name == "nsys":
            shutil.copy(H200_RUN / "nsys" / "profile.sqlite", out / "profile.sqlite")
            (out / "profile.nsys-rep").write_bytes(b"")
        if pass_name == "ncu":
            # Stands in for report.ncu-rep; export_counters below "imports" it.
            shutil.copy(H200_RUN / "ncu" / "counters.csv", out / "report.ncu-rep")

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def poll(self) -> int:
        return 0


@pytest.fixture()
def patched(monkeypatch):
    FakeProcess.calls = []
    FakeProcess.exports = []
    monkeypatch.setattr(orchestrate.subprocess, "Popen", FakeProcess)
    monkeypatch.setattr(nsys, "find_nsys", lambda: NSYS)
    monkeypatch.setattr(nsys, "nsys_version", lambda _path: "2025.3.1.90")
    monkeypatch.setattr(nsys, "profile_help", lambda _path: NSYS_HELP)
    monkeypatch.setattr(
        nsys, "export_sqlite", lambda _nsys, out_base, **_kw: FakeProcess.exports.append(out_base) or ""
    )
    monkeypatch.setattr(ncu, "find_ncu", lambda: NCU)
    monkeypatch.setattr(ncu, "ncu_version", lambda _path: "2025.3.1.0")
    monkeypatch.setattr(
        ncu, "export_counters", lambda _ncu, report, csv_path: shutil.copy(report, csv_path) and ""
    )
    return FakeProcess


def test_exact_argv_of_every_pass(patched, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    out = tmp_path / "run"
    Orchestrator(
        Target([str(script), "--lr", "0.1"]),
        RunOptions(out_dir=out, mode="hybrid", warmup=2, steps=3, nvtx_modules=True),
    ).run()
    torch_argv, nsys_argv, ncu_argv = patched.calls

    def inject(
        pass_name: str, steps: int, modules: bool, warmup: int = 2, more: tuple[str, ...] = ()
    ) -> list[str]:
        return [
            sys.executable,
            "-m",
            "hybrid.inject.script",
            "--pass",
            pass_name,
            "--out",
            str(out / pass_name),
            "--warmup",
            str(warmup),
            *more,
            "--steps",
            str(steps),
            *(["--nvtx-modules"] if modules else []),
            "--",
            str(script),
            "--lr",
            "0.1",
        ]

    # The plain reference is a window of the torch pass's process, timed before torch.profiler starts.
    window = ["--plain-steps", "10", "--plain-on-cpu"]  # on CPU-only runs too: the profiler's own slowdown
    assert torch_argv == inject("torch", 3, False)[:-4] + [*window, "--", str(script), "--lr", "0.1"]
    # Python sampling (--callsites python, the default): the report is exported apart, with its payloads.
    assert nsys_argv == [
        str(NSYS),
        "profile",
        "-t",
        "cuda,nvtx",
        "-s",
        "none",
        "--cpuctxsw=none",
        "--cuda-graph-trace=node",
        "--export",
        "none",
        "-o",
        str(out / "nsys" / "profile"),
        "--force-overwrite",
        "true",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--python-sampling=true",
        "--python-sampling-frequency=1000",
        *inject("nsys", 3, True),
    ]
    assert patched.exports == [out / "nsys" / "profile"]
    selected = json.loads((out / "ncu" / "selected_kernels.json").read_text())
    assert selected, "kernels are selected from the nsys export"
    prefix = [
        str(NCU),
        "--export",
        str(out / "ncu" / "report.ncu-rep"),
        "--force-overwrite",
        "--clock-control",
        "none",
        "--cache-control",
        "all",
        "--target-processes",
        "all",
        "--metrics",
    ]
    assert ncu_argv[: len(prefix)] == prefix
    rest = ncu_argv[len(prefix) + 1 :]
    assert rest == [
        "--kernel-name-base",
        "function",
        "--kernel-name",
        kernel_name_filter(selected),
        "--profile-from-start",
        "off",
        "--filter-mode",
        "per-launch-config",
        "--launch-count",
        "1",
        # The warmup the nsys pass dropped, exactly: ncu does not wait for steps to settle again.
        *inject("ncu", 1, True, warmup=4, more=("--fixed-warmup",)),
    ]
    run = json.loads((out / "run.json").read_text())
    assert [(p["name"], p["process"]) for p in run["passes"]] == [
        ("torch", None),
        ("plain", "torch"),
        ("nsys", None),
        ("ncu", None),
    ]
    assert run["passes"][1]["step_time_ms"] == 2.0 and run["passes"][1]["wall_s"] == 0.02
    assert "ncu_plan" not in run  # --mode hybrid runs every pass: no plan
    assert (out / "nsys" / "command.txt").read_text().startswith(str(NSYS))


def test_missing_nsys_falls_back_in_auto_and_fails_in_nsys_mode(patched, monkeypatch, tmp_path):
    monkeypatch.setattr(nsys, "find_nsys", lambda: None)
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    auto = Orchestrator(Target([str(script)]), RunOptions(out_dir=tmp_path / "auto", mode="auto", steps=3))
    auto.run()
    assert [c[c.index("--pass") + 1] for c in patched.calls] == ["torch"]  # no Nsight pass ran
    assert any("nsys) was not found" in reason for reason in auto.mode_reasons)
    with pytest.raises(ProfilerError) as failed:
        Orchestrator(
            Target([str(script)]), RunOptions(out_dir=tmp_path / "strict", mode="nsys", steps=3)
        ).run()
    assert "--mode nsys needs it" in failed.value.cause and "HYBRID_NSYS" in failed.value.fix
    assert failed.value.exit_code == 4


def test_plain_reference_is_a_window_of_the_torch_pass_or_a_pass_of_its_own(patched, monkeypatch, tmp_path):
    monkeypatch.setattr(nsys, "find_nsys", lambda: None)
    script = tmp_path / "train.py"
    script.write_text("pass\n")

    runs = iter(range(100))  # a fresh run directory each time: hybrid never reuses one

    def passes(**options) -> list[tuple[str, str, str | None]]:
        patched.calls = []
        Orchestrator(
            Target([str(script)]), RunOptions(out_dir=tmp_path / f"run{next(runs)}", steps=30, **options)
        ).run()
        return [
            (
                c[c.index("--pass") + 1],
                c[c.index("--steps") + 1],
                c[c.index("--plain-steps") + 1] if "--plain-steps" in c else None,
            )
            for c in patched.calls
        ]

    # --baseline: a plain pass of its own over every step, and no window in the torch pass.
    assert passes(baseline=True) == [("plain", "30", None), ("torch", "30", None)]
    assert passes() == [("torch", "30", str(orchestrate.SHORT_PLAIN_STEPS))]
    # A torch pass without its window (the injector ran none): a short plain pass, if the torch pass was
    # cheap.
    monkeypatch.setattr(Orchestrator, "plain_window_steps", 0)
    assert passes() == [("torch", "30", None), ("plain", str(orchestrate.SHORT_PLAIN_STEPS), None)]
    monkeypatch.setattr(orchestrate, "CHEAP_PLAIN_PASS_S", -1.0)
    assert passes(mode="auto") == [("torch", "30", None)]


def test_auto_mode_skips_ncu_where_counters_cannot_change_the_primary(patched, tmp_path):
    # simple_cnn b64 on the H200 is launch-bound: the analysis of its torch and nsys passes bounds what
    # faster kernels save below the primary finding, so --mode auto leaves ncu out and says why.
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    out = tmp_path / "run"
    orchestrator = Orchestrator(
        Target([str(script)]), RunOptions(out_dir=out, mode="auto", warmup=2, steps=3)
    )
    orchestrator.run()
    assert [c[c.index("--pass") + 1] for c in patched.calls] == ["torch", "nsys"]
    run = json.loads((out / "run.json").read_text())
    ncu_pass = next(p for p in run["passes"] if p["name"] == "ncu")
    assert ncu_pass["status"] == "skipped" and ncu_pass["wall_s"] == 0.0
    assert not run["ncu_plan"]["run"] and "counters cannot change the primary" in run["ncu_plan"]["reason"]
    # What the reason says in words: the kernel time counters could move, and its weighed saving.
    plan = run["ncu_plan"]
    assert f"give a cause to {plan['movable_ms']:.2f} ms" in plan["reason"]
    assert f"would save {plan['headroom_ms']:.2f} ms" in plan["reason"]
    assert ncu_pass["contributed"] == run["ncu_plan"]["reason"]
    assert any(
        r.startswith("ncu pass skipped: counters can give a cause to") and r.endswith("--mode hybrid runs it")
        for r in run["mode_reasons"]
    )
    # The final analysis reuses the profiles the plan loaded: the same document as re-reading the directory.
    from hybrid.pipeline import analyze_run_dir

    reused, reread = orchestrator.results(), analyze_run_dir(out)
    assert reused["diagnosis"]["primary_bottleneck"] == reread["diagnosis"]["primary_bottleneck"]
    assert reused["diagnosis"]["bottlenecks"] == reread["diagnosis"]["bottlenecks"]
    assert reused["passes"] == reread["passes"] and reused["warnings"] == reread["warnings"]
    assert [p["status"] for p in reused["passes"] if p["name"] == "ncu"] == ["skipped"]


class FailsWhenRunAgain(FakeProcess):
    """A script that cannot run twice (it consumed its input): the torch pass measures, the nsys pass
    raises, as the real injector records it (outcome exception, exit status 1)."""

    def __init__(self, argv, **kwargs) -> None:
        super().__init__(argv, **kwargs)
        inner = argv[argv.index("hybrid.inject.script") :]
        self.pass_name = inner[inner.index("--pass") + 1]
        if self.pass_name == "nsys":
            out = Path(inner[inner.index("--out") + 1])
            inject = json.loads((out / "inject.json").read_text())
            inject.update(
                outcome="exception",
                exit_code=1,
                measured_steps=0,
                traceback="FileExistsError: out/predictions.csv exists: remove it first",
            )
            (out / "inject.json").write_text(json.dumps(inject))

    def wait(self, timeout: float | None = None) -> int:
        return 1 if self.pass_name == "nsys" else 0


def test_a_script_that_cannot_run_twice_keeps_the_windows_of_its_first_process(
    patched, monkeypatch, tmp_path
):
    monkeypatch.setattr(orchestrate.subprocess, "Popen", FailsWhenRunAgain)
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    out = tmp_path / "run"
    Orchestrator(Target([str(script)]), RunOptions(out_dir=out, mode="auto", warmup=2, steps=3)).run()
    assert [c[c.index("--pass") + 1] for c in patched.calls] == ["torch", "nsys"]  # ncu never ran it again
    run = json.loads((out / "run.json").read_text())
    assert [(p["name"], p["status"]) for p in run["passes"]] == [
        ("torch", "ok"),
        ("plain", "ok"),
        ("nsys", "failed"),
    ]
    reason = next(r for r in run["mode_reasons"] if "cannot run more than once" in r)
    assert reason.startswith(
        "the workload failed in the nsys pass (exit status 1): FileExistsError: "
        "out/predictions.csv exists: remove it first, after the torch pass had measured"
    )
    assert (
        "not run: nsys, ncu" in reason and run["passes"][2]["message"] == "the workload failed when run again"
    )
    # An explicit mode fails instead: --mode nsys needs the nsys pass (exit 3, the workload's failure).
    with pytest.raises(WorkloadError):
        Orchestrator(
            Target([str(script)]), RunOptions(out_dir=tmp_path / "strict", mode="nsys", steps=3)
        ).run()


def test_a_pass_that_outlives_its_workloads_record_is_stopped_as_stuck(tmp_path, monkeypatch):
    """A collector that hangs after its workload ended (the workload wrote inject.json, the process never
    exits) is stopped after AFTER_WORKLOAD_EXIT_S, its whole process group with it, and the pass says why."""
    monkeypatch.setattr(orchestrate, "AFTER_WORKLOAD_EXIT_S", 1.0)
    script = Path(__file__).parent / "scripts" / "train_optimizer.py"
    orchestrator = Orchestrator(Target([str(script)]), RunOptions(out_dir=tmp_path / "run"))
    record = orchestrator.run_dir.pass_dir("nsys") / "inject.json"
    pid_file = tmp_path / "sleeper.pid"
    # The "collector": records the workload's end, then a child of its own hangs, as a stuck nsys would.
    stuck = (
        "import json, subprocess, sys, time\n"
        f"open({str(record)!r}, 'w').write(json.dumps({{'outcome': 'step_limit'}}))\n"
        "sleeper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(sleeper.pid))\n"
        "time.sleep(120)\n"
    )
    result = orchestrator._run_child("nsys", [sys.executable, "-c", stuck])
    assert result.status == "failed" and result.returncode != 0
    assert "still running 1 s after the workload recorded its end" in result.message
    assert result.wall_s < 60
    sleeper = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # the group was signalled: its last member is reaped by init within moments
            os.kill(sleeper, 0)
            time.sleep(0.1)
        os.kill(sleeper, 0)


def test_the_final_analysis_reuses_the_plans_profiles_with_the_counters_that_came_after(
    patched, tmp_path, monkeypatch
):
    # The plan runs ncu (on every kernel): the run's analysis adds its counters to the torch and nsys
    # profiles the plan loaded, and is the document re-reading the directory gives.
    from hybrid.collect import ncu_plan
    from hybrid.pipeline import analyze_run_dir

    monkeypatch.setattr(ncu_plan, "plan_ncu", lambda *_a, **_k: ncu_plan.NcuPlan(True, "the test runs it"))
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    out = tmp_path / "run"
    orchestrator = Orchestrator(
        Target([str(script)]), RunOptions(out_dir=out, mode="auto", warmup=2, steps=3)
    )
    orchestrator.run()
    assert [c[c.index("--pass") + 1] for c in patched.calls] == ["torch", "nsys", "ncu"]
    reused, reread = orchestrator.results(), analyze_run_dir(out)
    assert reused["mode"] == reread["mode"] == "hybrid"
    assert reused["diagnosis"]["bottlenecks"] == reread["diagnosis"]["bottlenecks"]
    assert reused["roofline"] == reread["roofline"] and reused["roofline"]["source"] == "measured:ncu"
    assert reused["warnings"] == reread["warnings"]
