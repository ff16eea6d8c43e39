"""Predicted against realized saving of an overlap fix on two H200s: the exposed run's comm.exposed finding
(its replayed saving, weighed at the plain step) against the plain step of the run with the fix applied.

    python3 benchmarks/jobs/compare_twins.py EXPOSED_RUN FIXED_RUN
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(exposed: Path, fixed: Path) -> int:
    a, b = (json.loads((run / "results.json").read_text()) for run in (exposed, fixed))
    finding = next((f for f in a["diagnosis"]["bottlenecks"] if f["id"] == "comm.exposed"), None)
    plain_a, plain_b = (r["timing"].get("baseline_step_time_ms") for r in (a, b))
    realized = plain_a - plain_b if plain_a and plain_b else None
    predicted = None
    if finding is not None:
        predicted = finding.get("time_lost_baseline_ms") or finding["time_lost_ms"]
    row = {
        "exposed_plain_step_ms": plain_a,
        "fixed_plain_step_ms": plain_b,
        "realized_saving_ms": realized,
        "predicted_saving_ms": predicted,
        "method": finding and finding.get("time_lost_method"),
        "fix": a["job"]["collectives"]["replay"].get("best"),
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
