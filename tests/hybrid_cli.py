"""`python -m hybrid ARGS` as the CLI tests run it: this checkout first on PYTHONPATH (before any the caller
had), no colour, output captured, the exit status returned rather than raised."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_hybrid(*args: str, cwd: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        NO_COLOR="1",
    )
    return subprocess.run(
        [sys.executable, "-m", "hybrid", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd or ROOT,
        env=env,
        timeout=timeout,
    )
