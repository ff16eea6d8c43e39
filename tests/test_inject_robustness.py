"""Scripts that fight the injector, run for real on the CPU: a non-daemon thread that outlives the measured
steps, a script that changes its working directory, and a json.py in the working directory."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from hybrid_cli import inject_argv

from hybrid.collect.orchestrate import Orchestrator, RunOptions, Target
from hybrid.inject.script import LINGER_ENV

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"


# A thread that never ends is waited for this long, not the injector's 10 s (LINGER_S): what is asserted is
# that the pass ends and says so, whatever the wait.
LINGER_S = 1.0


def _inject(out: str, script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        inject_argv(Path(out), "plain", str(script), *args, flags=["--fixed-warmup"]),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", LINGER_ENV: str(LINGER_S)},
    )


@pytest.mark.slow
def test_a_thread_that_outlives_the_measured_steps_does_not_keep_the_pass_alive(tmp_path):
    started = time.monotonic()
    done = _inject(str(tmp_path / "out"), SCRIPTS / "lingering_thread.py", cwd=tmp_path)
    assert time.monotonic() - started < LINGER_S + 60  # not forever: the thread polls a queue without end
    assert done.returncode == 0, done.stderr
    assert "thread(s) producer still ran" in done.stderr
    inject = json.loads((tmp_path / "out" / "inject.json").read_text())
    assert inject["outcome"] == "step_limit" and inject["measured_steps"] == 3


@pytest.mark.slow
def test_a_script_that_changes_directory_does_not_move_the_outputs(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _inject("out", SCRIPTS / "moves_cwd.py", str(elsewhere), cwd=tmp_path)  # --out relative to the cwd
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out" / "inject.json").read_text())["measured_steps"] == 3
    assert not (elsewhere / "out").exists()


@pytest.mark.slow
def test_a_json_py_in_the_working_directory_does_not_break_a_run(tmp_path, monkeypatch):
    (tmp_path / "json.py").write_text("raise ImportError('the user json.py, not the standard library')\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys\nimport torch\nimport hybrid\n"
        "seen = {'safe_path_env': os.environ.get('PYTHONSAFEPATH'), 'path0': sys.path[0]}\n"
        "open(sys.argv[1], 'w').write(repr(seen))\n"
        "for _ in range(20):\n    torch.ones(4).sum()\n    hybrid.mark_step()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    Orchestrator(
        Target(["train.py", str(tmp_path / "seen.txt")]),
        RunOptions(out_dir=tmp_path / "run", mode="torch", warmup=1, steps=3),
    ).run()
    inject = json.loads((tmp_path / "run" / "torch" / "inject.json").read_text())
    assert inject["outcome"] == "step_limit" and inject["measured_steps"] == 3
    # The script saw what `python train.py` gives it: its folder first, no variable of hybrid's own.
    assert (tmp_path / "seen.txt").read_text() == repr({"safe_path_env": None, "path0": str(tmp_path)})
