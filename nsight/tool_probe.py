"""Calls made to an external tool (nsys, ncu) to learn about it or read its output back: each ends
within a bounded time, children included. A stuck binary (an nsys wrapper script whose child hangs, a
license server that never answers) otherwise held `hybrid doctor` for minutes, and killing only the
tool's own process at a timeout left its children running, holding the output pipe."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence

PROBE_TIMEOUT_ENV = "HYBRID_PROBE_TIMEOUT_S"
# `nsys --version` and `ncu --version` answer in well under a second on the H200 machine; 20 s leaves
# room for a cold network file system.
DEFAULT_PROBE_TIMEOUT_S = 20.0


def probe_timeout_s() -> float:
    """The bound on a version or help query: HYBRID_PROBE_TIMEOUT_S where it is a positive number."""
    try:
        value = float(os.environ.get(PROBE_TIMEOUT_ENV, ""))
    except ValueError:
        return DEFAULT_PROBE_TIMEOUT_S
    return value if 0 < value < float("inf") else DEFAULT_PROBE_TIMEOUT_S


def run_bounded(argv: Sequence[str], timeout_s: float, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True, errors="replace") in a session of its own: at
    `timeout_s` the whole process group is killed and subprocess.TimeoutExpired raised. OSError where the
    binary cannot be started."""
    with subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        **kwargs,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()  # every member of the group is gone: the pipes close
            raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, stdout, stderr)
