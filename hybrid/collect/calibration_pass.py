"""The calibration pass of `hybrid run`: after the profiling passes, a short child process with no collector
times the run's own GEMM/convolution shapes on its GPU in the precisions the advice offers
(hybrid.collect.calibrate_run), and leaves RUN/calibration.json for the analysis. Skipped, with the reason
in run.json, where the workload used no CUDA device, the torch pass left no trace, or --no-calibrate."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hybrid.collect.calibrate_run import DEFAULT_BUDGET_S
from hybrid.files import read_regular_text
from hybrid.numbers import significant as fmt
from hybrid.replay.calibrate import CALIBRATION_FILE, speedups, summary
from hybrid.rules.registry import RULE_BY_ID
from hybrid.rundir import RunDir

NAME = "calibration"
# Seconds the child may take beyond its timing budget, for Python, torch and CUDA start-up and reading the
# torch trace: the trace's shapes took 2.9 s from resnet50's 0.76 MB trace.json.gz and 4.6 s from the HF
# trainer's 1.17 MB on the 2 loaded cores of the development box. A child still running after them is stopped.
START_UP_ALLOWANCE_S = 60.0
ALLOWANCE_S_PER_TRACE_MB = 5.0
DISABLED = "calibration turned off (--no-calibrate)"
NOT_NEEDED = (
    "no finding of the torch and nsys passes replays a GEMM/convolution speedup (an FP32 or misaligned "
    "GEMM): nothing to time"
)
NO_CUDA = "no CUDA device to calibrate on"
NO_TRACE = (
    "no torch trace to take the GEMM/convolution shapes from (nsys and ncu record launch grids, not matrix "
    "dimensions)"
)


def pass_row(
    run_dir: RunDir,
    *,
    enabled: bool,
    cuda_used: bool,
    env: dict[str, str],
    progress: Callable[[str, str, str], None],
    device: str = "cuda",
    budget_s: float = DEFAULT_BUDGET_S,
    finding_ids: list[str] | None = None,
) -> dict | None:
    """Run the calibration pass: its run.json pass row (hybrid.collect.orchestrate PassResult's fields), or
    None where it was skipped (the reason is then run.json's `calibration.skipped`, which the analysis
    gives the findings it leaves on a closed form). A failed calibration never fails the run: the GEMM
    fixes then keep their closed form, and the row says why. `finding_ids`: the findings (kept or below
    their floor) of the analysis the ncu plan made, where one was made: the pass runs only if one of them
    replays a calibrated speedup (resnet50 b64 on the H200 timed 8 shapes in 8.6 s, 16% of its diagnosis,
    for findings that read none)."""
    trace = run_dir.torch_trace()
    needed = finding_ids is None or any(
        getattr(RULE_BY_ID.get(finding_id), "calibrated", False) for finding_id in finding_ids
    )
    if not enabled or not cuda_used or trace is None or not needed:
        skipped = (
            DISABLED
            if not enabled
            else NO_CUDA
            if not cuda_used
            else NO_TRACE
            if trace is None
            else NOT_NEEDED
        )
        run_dir.update_run_json(calibration={"skipped": skipped})
        return None
    argv = [
        sys.executable,
        "-m",
        "hybrid.collect.calibrate_run",
        str(run_dir.path),
        "--device",
        device,
        "--budget-s",
        f"{budget_s:g}",
    ]
    run_dir.write_text(f"{NAME}/command.txt", shlex.join(argv) + "\n")
    progress(NAME, "start", f"timing this run's GEMM/conv shapes on the GPU (~{budget_s:g} s)")
    started = time.monotonic()
    limit_s = budget_s + START_UP_ALLOWANCE_S + ALLOWANCE_S_PER_TRACE_MB * trace.stat().st_size / 1e6
    try:
        row = _run(argv, env, run_dir.pass_dir(NAME) / "console.log", limit_s)
    except OSError as error:  # its log could not be written (a full disk): the run goes on without it
        row = {"status": "failed", "returncode": None, "message": f"could not start: {error}"}
    row["wall_s"] = round(time.monotonic() - started, 3)
    if row["status"] == "ok":
        try:
            calibration = json.loads(read_regular_text(run_dir.path / CALIBRATION_FILE))
            row["contributed"] = summary(calibration)
            # The cost line's short form: what was measured, in a few words.
            found = speedups(calibration)
            row["message"] = ", ".join(f"{name} {fmt(value)}x" for name, value in found.items()) or (
                "no GEMM/conv shape timed"
            )
        except (OSError, ValueError) as error:
            row.update(status="failed", message=f"its {CALIBRATION_FILE} is unreadable: {error}")
    if row["status"] != "ok":
        row["contributed"] = f"nothing: {row['message']}"
    progress(NAME, "end", row["status"])
    return {"name": NAME, "command": argv, **row}


def _run(argv: list[str], env: dict[str, str], log: Path, timeout_s: float) -> dict:
    """The child's status, exit code and, where it failed, why (its last line of output)."""
    with open(log, "w", encoding="utf-8", errors="replace") as out:
        try:
            done = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return {
                "status": "failed",
                "returncode": None,
                "message": f"stopped after {timeout_s:.0f} s (see {log})",
            }
    if done.returncode == 0:
        return {"status": "ok", "returncode": 0, "message": ""}
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if line.startswith("error:")), lines[-1] if lines else "")
    return {
        "status": "failed",
        "returncode": done.returncode,
        "message": f"exit status {done.returncode}: {last.strip()[:300]} (see {log})",
    }
