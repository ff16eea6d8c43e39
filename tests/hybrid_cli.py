"""`python -m hybrid ARGS` as the CLI tests run it: this checkout first on PYTHONPATH (before any the caller
had), no colour, output captured, the exit status returned rather than raised."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A suite started with SIGINT ignored (a shell's background job, nohup) hands that on to every child, and
# Python leaves an ignored SIGINT ignored: the Ctrl-C tests' signal was lost and each waited out its 60 s
# timeout and failed (test_cli's and test_inject's, 126 s of a `make test` started from a script,
# 2026-12-04). Their child starts through this, which sets SIGINT back to its default and execs the command
# (a default disposition survives exec). Popen's preexec_fn could do the same but is unsafe in a process
# with threads (ruff PLW1509); restore_signals resets only SIGPIPE, SIGXFZ and SIGXFSZ, and process_group
# changes no disposition.
_SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def interruptible(argv: Sequence[str]) -> list[str]:
    """argv started with SIGINT at its default, whatever this process inherited."""
    return [sys.executable, "-c", _SIGINT_DEFAULT, *argv]


def inject_argv(
    out: Path,
    pass_name: str,
    target: str,
    *args: str,
    warmup: int = 1,
    steps: int = 3,
    flags: Sequence[str] = (),
) -> list[str]:
    """`python -m hybrid.inject.script` on `target ARGS` for one pass, as the orchestrator starts it."""
    return [
        sys.executable,
        "-m",
        "hybrid.inject.script",
        "--pass",
        pass_name,
        "--out",
        str(out),
        "--warmup",
        str(warmup),
        "--steps",
        str(steps),
        *flags,
        "--",
        target,
        *args,
    ]


def hybrid_env(**extra: str) -> dict[str, str]:
    """The environment the CLI tests give `python -m hybrid`: this checkout first on PYTHONPATH, no colour."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, NO_COLOR="1", **extra)


def run_hybrid(
    *args: str, cwd: Path | None = None, timeout: float = 240, preexec: Callable[[], object] | None = None
) -> subprocess.CompletedProcess:
    """`preexec`: run in the child before the CLI starts (a umask, a resource limit)."""
    return subprocess.run(
        [sys.executable, "-m", "hybrid", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd or ROOT,
        env=hybrid_env(),
        timeout=timeout,
        preexec_fn=preexec,
    )
