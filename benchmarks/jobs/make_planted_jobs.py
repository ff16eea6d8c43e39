"""Writes the job list that captures the planted suite on the GPU (benchmarks/gpu_session.py runs it).

Per planted script: one `hybrid run --mode hybrid` (torch, nsys and ncu passes: their artifacts give
the diagnosis in every mode, re-analyzed offline), then a plain pass of the script and of its fixed
twin (no collector) for the realized step-time saving of the fix.
Usage: python benchmarks/jobs/make_planted_jobs.py NAME [NAME ...] > jobs.tsv
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PLANTED = Path("benchmarks/planted")
WARMUP, STEPS, PLAIN_STEPS = 3, 5, 10


def plain(script: str, out: str) -> str:
    return (
        f"python3 -m hybrid.inject.script --pass plain --out $RUN/{out} "
        f"--warmup {WARMUP} --steps {PLAIN_STEPS} "
        f"-- {PLANTED / script} > $RUN/{out}.log 2>&1"
    )


def job(entry: dict) -> str:
    parts = [
        (
            f"python3 -m hybrid run --mode hybrid --warmup {WARMUP} --steps {STEPS} --quiet --out $RUN/run "
            f"{PLANTED / entry['script']} > $RUN/hybrid.log 2>&1; rc=$?"
        ),
        plain(entry["script"], "plain_script"),
    ]
    if entry.get("twin"):
        parts.append(plain(entry["twin"], "plain_twin"))
    parts.append("tail -3 $RUN/hybrid.log; exit $rc")
    return f"{entry['name']}\t" + "; ".join(parts)


def main() -> None:
    manifest = json.loads((PLANTED / "manifest.json").read_text())
    by_name = {entry["name"]: entry for entry in manifest["scripts"]}
    for name in sys.argv[1:]:
        print(job(by_name[name]))


if __name__ == "__main__":
    main()
