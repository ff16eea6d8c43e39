"""Predicted against realized saving of an overlap fix on two H200s: the exposed job's comm.exposed finding
against the plain steps of the job with the fix applied.

    python3 benchmarks/jobs/compare_twins.py EXPOSED_RUN FIXED_RUN

A job moves at its slowest rank's pace, so a job's plain step is the largest of its ranks' mean plain steps
(each rank's plain window, timed before its collector starts). The finding's saving is taken at the profiled
step and carried to the plain step as the same share of it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from hybrid.analysis.job_metrics import find_rank_dirs
from hybrid.pipeline import plain_step_samples_ms
from hybrid.rundir import RunDir


def plain_step_ms(run: Path) -> float | None:
    means = [
        np.mean(s) for s in (plain_step_samples_ms(RunDir(f)) for f in find_rank_dirs(run).values()) if s
    ]
    return float(max(means)) if means else None


def main(exposed: Path, fixed: Path) -> int:
    a, b = (json.loads((run / "results.json").read_text()) for run in (exposed, fixed))
    finding = next((f for f in a["diagnosis"]["bottlenecks"] if f["id"] == "comm.exposed"), None)
    plain_a, plain_b = plain_step_ms(exposed), plain_step_ms(fixed)
    profiled_a = a["job"]["metrics"]["step_time_ms"]["value"]
    realized = plain_a - plain_b if plain_a is not None and plain_b is not None else None
    predicted = None
    if finding is not None and plain_a and profiled_a:
        predicted = finding["time_lost_ms"] * plain_a / profiled_a
    row = {
        "exposed_plain_step_ms": plain_a,
        "exposed_profiled_step_ms": profiled_a,
        "fixed_plain_step_ms": plain_b,
        "realized_saving_ms": realized,
        "predicted_saving_ms": predicted,
        "predicted_at_profiled_step_ms": finding and finding["time_lost_ms"],
        "method": finding and finding.get("time_lost_method"),
        "fix": (a["job"].get("collectives", {}).get("replay") or {}).get("best"),
        "error_pct": 100.0 * (predicted - realized) / realized
        if predicted is not None and realized
        else None,
        "fixed_run_findings_above_low": [
            f["id"] for f in b["diagnosis"]["bottlenecks"] if f["severity"] not in ("LOW", "INFO")
        ],
    }
    print(json.dumps(row, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
