"""Prints what benchmarks/jobs/s6_userprof.tsv looks for in a `hybrid run` of tests/scripts/own_profilers.py:
each pass's status and step time, the steps measured, the ProfilerStep ranges of the torch trace (one series:
ProfilerStep#0..N-1, once each), the script's profiler as inject.json records it, the report's note about it,
and whether the script wrote any trace of its own beside the run.

    python benchmarks/show_own_profiler_run.py RUN_DIR
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path


def main(run: Path) -> None:
    results = json.loads((run / "results.json").read_text())
    for entry in results["passes"]:
        print(f"pass {entry['name']:6s} {entry['status']:8s} step {entry.get('step_time_ms')} ms")
    print(
        "steps_measured",
        results["workload"]["steps_measured"],
        "step_source",
        results["workload"]["step_source"],
    )
    trace = run / "torch" / "trace.json"
    raw = (
        trace.read_bytes()
        if trace.is_file()
        else gzip.decompress((run / "torch" / "trace.json.gz").read_bytes())
    )
    steps = Counter(
        e["name"] for e in json.loads(raw)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
    )
    print("ProfilerStep ranges", sorted(steps.items(), key=lambda item: int(item[0].split("#")[1])))
    for name in ("torch", "nsys", "ncu", "plain"):
        inject = run / name / "inject.json"
        if inject.is_file():
            print(f"{name} user_profilers", json.loads(inject.read_text()).get("user_profilers"))
    print("notes", [w for w in results["warnings"] if "kept inert" in w])
    written = [p.name for p in (run.parent / "tb", run.parent / "user_trace.json") if p.exists()]
    print("written by the script's profiler:", written or "nothing")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
