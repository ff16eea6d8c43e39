"""The unmarked-workload table of issue 11 from one GPU call's job folders (benchmarks/jobs/s3_steps.tsv).

    python benchmarks/unmarked_table.py CALL_DIR [--bare-dir DIR]

For each `steps_<workload>` folder: the script's own per-step time in a plain run (its ITER_MS line), the
step time of hybrid's plain pass (steps found without edits, no collector: the comparable figure) and of
its nsys pass (the timeline the findings come from, collector overhead included), how they were found, the
wall time of the plain run and of the hybrid run, and the primary finding; beside it, the primary that
`hybrid report` gives on the bare export of the same workload (tests/fixtures/bare/<workload>.sqlite, or
--bare-dir/<workload>.sqlite). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from hybrid.pipeline import analyze_export

ITER = re.compile(r"(?:sub_ms|iteration_ms)=([\d.]+)")
WALL = re.compile(r"plain_s=([\d.]+) hybrid_s=([\d.]+)")


def _primary(results: dict) -> str:
    primary = (results.get("diagnosis") or {}).get("primary_bottleneck") or {}
    return f"{primary.get('category')} {primary.get('id')}" if primary else "none"


def row(job: Path, bare_dir: Path) -> dict:
    name = job.name.removeprefix("steps_")
    plain = (job / "plain.txt").read_text(errors="replace") if (job / "plain.txt").exists() else ""
    iter_ms = ITER.search(plain)
    wall = WALL.search((job / "wall.txt").read_text()) if (job / "wall.txt").exists() else None
    results_path = job / "run" / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    workload, timing = results.get("workload") or {}, results.get("timing") or {}
    bare = bare_dir / f"{name}.sqlite"
    bare_primary = _primary(analyze_export(bare)) if bare.exists() else "n/a"
    step_ms = timing.get("step_time_ms")
    plain_inject = job / "run" / "plain" / "inject.json"
    plain_ms = json.loads(plain_inject.read_text()).get("step_time_ms") if plain_inject.exists() else None
    script_ms = float(iter_ms.group(1)) if iter_ms else None
    return {
        "workload": name,
        "script_ms": script_ms,
        "hybrid_ms": step_ms,
        "plain_pass_ms": plain_ms,
        "diff_pct": round(100 * (plain_ms / script_ms - 1), 1) if plain_ms and script_ms else None,
        "step": (
            f"{workload.get('step_unit')} ({workload.get('step_source')}, {workload.get('step_confidence')})"
        ),
        "warmup": workload.get("warmup_steps"),
        "plain_s": float(wall.group(1)) if wall else None,
        "hybrid_s": float(wall.group(2)) if wall else None,
        "primary": _primary(results) if results else "no results",
        "bare_primary": bare_primary,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("call_dirs", type=Path, nargs="+")
    parser.add_argument(
        "--bare-dir", type=Path, default=Path(__file__).parent.parent / "tests" / "fixtures" / "bare"
    )
    args = parser.parse_args()
    jobs = sorted((job for call in args.call_dirs for job in call.glob("steps_*")), key=lambda job: job.name)
    rows = [
        row(job, args.bare_dir)
        for job in jobs
        if job.name not in ("steps_tracer_cost", "steps_functions_trace")
    ]
    print(
        "| workload | script ms/step | hybrid plain pass ms/step | diff | nsys pass ms/step | step (source, "
        "confidence) | warmup dropped | plain wall s | hybrid wall s | x plain "
        "| primary (hybrid run --mode nsys) | primary (bare export) |"
    )
    print("| --- " * 12 + "|")
    for r in rows:
        ratio = round(r["hybrid_s"] / r["plain_s"], 1) if r["plain_s"] and r["hybrid_s"] else None
        cells = [
            r["workload"],
            r["script_ms"],
            r["plain_pass_ms"] and round(r["plain_pass_ms"], 3),
            f"{r['diff_pct']:+.1f}%" if r["diff_pct"] is not None else None,
            r["hybrid_ms"] and round(r["hybrid_ms"], 3),
            r["step"],
            r["warmup"],
            r["plain_s"],
            r["hybrid_s"],
            ratio,
            r["primary"],
            r["bare_primary"],
        ]
        print("| " + " | ".join("" if c is None else str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
