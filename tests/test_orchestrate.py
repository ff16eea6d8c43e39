"""The exact argv `hybrid run` sends to nsys and ncu, with the subprocess call patched (no GPU here).

The patched process only leaves behind what the real one would (inject.json, the export, the CSV),
copied from a real H200 run directory, so the orchestrator walks its real path: torch pass, nsys
pass, kernel selection from the export, ncu pass."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from hybrid import orchestrate
from hybrid.errors import ProfilerError
from hybrid.orchestrate import Orchestrator, RunOptions, Target
from nsight import ncu, nsys

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
        inner = argv[argv.index("hybrid.inject"):]
        pass_name = inner[inner.index("--pass") + 1]
        out = Path(inner[inner.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        inject = json.loads((H200_RUN / pass_name / "inject.json").read_text()) if pass_name != "plain" else {}
        inject.update(outcome="step_limit", exit_code=0, cuda_available=True, measured_steps=3, steps_seen=5)
        (out / "inject.json").write_text(json.dumps(inject))
        if pass_name == "nsys":
            shutil.copy(H200_RUN / "nsys" / "profile.sqlite", out / "profile.sqlite")
            (out / "profile.nsys-rep").write_bytes(b"")
        if pass_name == "ncu":
            # Stands in for report.ncu-rep; export_counters below "imports" it.
            shutil.copy(H200_RUN / "ncu" / "counters.csv", out / "report.ncu-rep")

    def wait(self) -> int:
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
    monkeypatch.setattr(nsys, "export_sqlite", lambda _nsys, out_base, **_kw: FakeProcess.exports.append(out_base) or "")
    monkeypatch.setattr(ncu, "find_ncu", lambda: NCU)
    monkeypatch.setattr(ncu, "ncu_version", lambda _path: "2025.3.1.0")
    monkeypatch.setattr(ncu, "export_counters",
                        lambda _ncu, report, csv_path: shutil.copy(report, csv_path) and "")
    return FakeProcess


def test_exact_argv_of_every_pass(patched, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    out = tmp_path / "run"
    Orchestrator(Target([str(script), "--lr", "0.1"]), RunOptions(out_dir=out, mode="hybrid", warmup=2, steps=3,
                                                                    nvtx_modules=True)).run()
    torch_argv, plain_argv, nsys_argv, ncu_argv = patched.calls

    def inject(pass_name: str, steps: int, modules: bool) -> list[str]:
        return [sys.executable, "-m", "hybrid.inject", "--pass", pass_name, "--out", str(out / pass_name),
                "--warmup", "2", "--steps", str(steps), *(["--nvtx-modules"] if modules else []),
                "--", str(script), "--lr", "0.1"]

    assert torch_argv == inject("torch", 3, False)
    # The torch pass was cheap: a short plain pass follows it, the reference for collector overhead.
    assert plain_argv == inject("plain", 3, False)
    # Python sampling (--callsites python, the default): the report is exported apart, with its payloads.
    assert nsys_argv == [
        str(NSYS), "profile", "-t", "cuda,nvtx,osrt", "-s", "none", "--cpuctxsw=none", "--cuda-graph-trace=node",
        "--export", "none", "-o", str(out / "nsys" / "profile"), "--force-overwrite", "true",
        "--osrt-threshold=10000", "--osrt-backtrace-threshold=1000000000",
        "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
        "--python-sampling=true", "--python-sampling-frequency=1000", *inject("nsys", 3, True)]
    assert patched.exports == [out / "nsys" / "profile"]
    selected = json.loads((out / "ncu" / "selected_kernels.json").read_text())
    assert selected, "kernels are selected from the nsys export"
    prefix = [str(NCU), "--export", str(out / "ncu" / "report.ncu-rep"), "--force-overwrite", "--clock-control", "none", "--cache-control", "all",
              "--target-processes", "all", "--metrics"]
    assert ncu_argv[:len(prefix)] == prefix
    rest = ncu_argv[len(prefix) + 1:]
    assert rest == ["--kernel-name-base", "function", "--kernel-name", ncu.kernel_name_filter(selected),
                    "--profile-from-start", "off",
                    "--filter-mode", "per-launch-config", "--launch-count", "1", *inject("ncu", 1, True)]
    run = json.loads((out / "run.json").read_text())
    assert [p["name"] for p in run["passes"]] == ["torch", "plain", "nsys", "ncu"]
    assert (out / "nsys" / "command.txt").read_text().startswith(str(NSYS))


def test_missing_nsys_falls_back_in_auto_and_fails_in_nsys_mode(patched, monkeypatch, tmp_path):
    monkeypatch.setattr(nsys, "find_nsys", lambda: None)
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    auto = Orchestrator(Target([str(script)]), RunOptions(out_dir=tmp_path / "auto", mode="auto", steps=3))
    auto.run()
    assert [c[c.index("--pass") + 1] for c in patched.calls] == ["torch", "plain"]  # no Nsight pass ran
    assert any("nsys) was not found" in reason for reason in auto.mode_reasons)
    with pytest.raises(ProfilerError) as failed:
        Orchestrator(Target([str(script)]), RunOptions(out_dir=tmp_path / "strict", mode="nsys", steps=3)).run()
    assert "--mode nsys needs it" in failed.value.cause and "HYBRID_NSYS" in failed.value.fix
    assert failed.value.exit_code == 4


def test_plain_pass_runs_first_with_baseline_and_not_after_an_expensive_torch_pass(patched, monkeypatch, tmp_path):
    monkeypatch.setattr(nsys, "find_nsys", lambda: None)
    script = tmp_path / "train.py"
    script.write_text("pass\n")

    def passes(**options) -> list[str]:
        patched.calls = []
        Orchestrator(Target([str(script)]), RunOptions(out_dir=tmp_path / str(len(options)), steps=30,
                                                       **options)).run()
        return [(c[c.index("--pass") + 1], c[c.index("--steps") + 1]) for c in patched.calls]

    assert passes(baseline=True) == [("plain", "30"), ("torch", "30")]
    assert passes() == [("torch", "30"), ("plain", str(orchestrate.SHORT_PLAIN_STEPS))]
    monkeypatch.setattr(orchestrate, "CHEAP_PLAIN_PASS_S", -1.0)
    assert passes(mode="auto") == [("torch", "30")]
