"""What one diagnosis costs next to one plain run of the same workload (issue 21), on the GPU machine.

`measure` runs the workload's own command (plain, no hybrid) and then the diagnosis of it, each timed
end to end from this process, progress output and analysis included, and writes RUN/row.json: the
benchmarks/results/cost.json row with each pass's wall time from the run's run.json, what the ncu plan
decided and the diagnosis' answers (primary, severities, savings). `collect` gathers the rows of unpacked
job folders into cost.json and checks each against its goal.

  python benchmarks/cost_bench.py measure --name resnet50 --out $RUN \\
      --plain "python3 -m hybrid.models resnet50 ..." \\
      --diagnose "python3 -m hybrid diagnose --model resnet50 --out $RUN/run --quiet"
  python benchmarks/cost_bench.py collect JOB_DIR... > benchmarks/results/cost.json
  python benchmarks/cost_bench.py collect --into benchmarks/results/cost.json JOB_DIR...   # re-measured rows

Goals: `make diagnose MODEL=resnet50` (its defaults) within 2 x plain + 30 s; any workload within
3 x plain + 60 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def _timed(command: str, log: Path, timeout_s: float) -> tuple[float, int | None]:
    started = time.monotonic()
    with log.open("w") as out:
        try:
            code: int | None = subprocess.run(
                ["bash", "-c", command], stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    return round(time.monotonic() - started, 2), code


def _answers(run_dir: Path) -> dict:
    """The diagnosis' primary finding and each finding's severity and saving (results.json)."""
    path = run_dir / "results.json"
    if not path.is_file():
        return {}
    results = json.loads(path.read_text())
    diagnosis = results.get("diagnosis") or {}
    primary = diagnosis.get("primary_bottleneck")
    return {
        "mode": results.get("mode"),
        "primary": primary.get("id") if isinstance(primary, dict) else primary,
        "findings": [
            {
                "id": f.get("id"),
                "severity": f.get("severity"),
                "time_lost_ms": f.get("time_lost_ms"),
                "time_lost_baseline_ms": f.get("time_lost_baseline_ms"),
            }
            for f in diagnosis.get("bottlenecks") or []
            if not f.get("not_measured")
        ],
    }


def measure(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plain_s, plain_rc = _timed(args.plain, out / "plain.log", args.timeout_s)
    diagnose_s, diagnose_rc = _timed(args.diagnose, out / "diagnose.log", args.timeout_s)
    run_dir = out / "run"
    run_json = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").is_file() else {}
    passes = {p["name"]: p.get("wall_s") for p in run_json.get("passes") or []}
    row = {
        "workload": args.name,
        "gpu": args.gpu,
        "compiled": args.compiled,
        "plain_s": plain_s,
        "diagnose_s": diagnose_s,
        "passes": passes,
        "goal": args.goal,
        "plain_rc": plain_rc,
        "diagnose_rc": diagnose_rc,
        "pass_detail": [
            {
                k: p.get(k)
                for k in (
                    "name",
                    "status",
                    "wall_s",
                    "process",
                    "step_time_ms",
                    "compile_cache",
                    "contributed",
                )
            }
            for p in run_json.get("passes") or []
        ],
        "collection_s": run_json.get("collection_s"),
        "ncu_plan": run_json.get("ncu_plan"),
        "plain_command": args.plain,
        "diagnose_command": args.diagnose,
        "answers": _answers(run_dir),
    }
    (out / "row.json").write_text(json.dumps(row, indent=1))
    print(json.dumps({k: row[k] for k in ("workload", "plain_s", "diagnose_s", "passes", "diagnose_rc")}))
    return 0 if diagnose_rc == 0 else 1


def goal_s(row: dict) -> float:
    """make diagnose MODEL=resnet50 (defaults): 2 x plain + 30 s; any other workload: 3 x plain + 60 s."""
    return 2 * row["plain_s"] + 30 if row.get("goal") == "make-diagnose-defaults" else 3 * row["plain_s"] + 60


def collect(args: argparse.Namespace) -> int:
    """The rows of the job folders; with --into, written into that cost.json in place of its rows of the same
    workload marked "valid": false (a measurement a known fault spoiled), the others kept."""
    rows = []
    for folder in args.dirs:
        path = Path(folder) / "row.json"
        if path.is_file():
            row = json.loads(path.read_text())
            row["goal_s"] = round(goal_s(row), 2)
            row["goal_met"] = row["diagnose_rc"] == 0 and row["diagnose_s"] <= row["goal_s"]
            rows.append(row)
    if args.into is None:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    fresh = {row["workload"] for row in rows}
    kept = [
        row
        for row in json.loads(args.into.read_text())
        if row.get("valid", True) or row["workload"] not in fresh
    ]
    args.into.write_text(json.dumps(kept + rows, indent=1) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("measure")
    run.add_argument("--name", required=True)
    run.add_argument("--out", required=True, help="job folder; the diagnosis must write its run to OUT/run")
    run.add_argument("--plain", required=True, help="the workload's own command")
    run.add_argument("--diagnose", required=True, help="the diagnosis (hybrid diagnose/run --out OUT/run)")
    run.add_argument("--gpu", default="NVIDIA H200")
    run.add_argument("--compiled", action="store_true", help="the workload calls torch.compile")
    run.add_argument("--goal", default="any", choices=("any", "make-diagnose-defaults"))
    run.add_argument("--timeout-s", type=float, default=400)
    gather = commands.add_parser("collect")
    gather.add_argument("dirs", nargs="+")
    gather.add_argument("--into", type=Path, help="a cost.json whose invalid rows these replace")
    args = parser.parse_args()
    return measure(args) if args.command == "measure" else collect(args)


if __name__ == "__main__":
    sys.exit(main())
