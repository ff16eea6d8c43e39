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
  python benchmarks/cost_bench.py plans > benchmarks/results/ncu_plans.json   # on this machine, no GPU

`plans` re-decides the ncu pass of every committed H200 capture with counters as `--mode auto` would
(its analysis without the counters) and sets beside it the answers with and without them: whether the
plan skipped ncu only where counters changed neither the primary, the severities nor the savings.

Goals: `make diagnose MODEL=resnet50` (its defaults) within 2 x plain + 30 s; any workload within
3 x plain + 60 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _timed(command: str, log: Path, timeout_s: float) -> tuple[float, int | None]:
    """The command's wall time and exit code (None: timed out); its output goes to `log`, each line after
    the seconds since the start at which it came, so the log shows where the time between passes went."""
    started = time.monotonic()
    with log.open("w") as out:
        child = subprocess.Popen(
            ["bash", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        timer = threading.Timer(timeout_s, child.kill)
        timer.start()
        try:
            for line in child.stdout:
                out.write(f"[{time.monotonic() - started:7.2f}] {line}")
            code: int | None = child.wait()
        finally:
            timer.cancel()
        if code is not None and code < 0 and time.monotonic() - started >= timeout_s:
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
    results_path = run_dir / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    row = {
        "workload": args.name,
        # the card the diagnosis ran on: a job list written for the H200 may get an H100
        "gpu": args.gpu or (results.get("device") or {}).get("name") or "unknown",
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


# Committed H200 captures with an ncu pass (run directories).
CAPTURES = ("tests/fixtures/planted/*/run", "tests/fixtures/runs/h200-*")
# Savings that differ by less than this, or less than 2%, are the same answer (a replay's rounding).
SAME_SAVING_MS = 0.05


def _diagnosis_answers(results: dict) -> dict:
    diagnosis = results.get("diagnosis") or {}
    primary = diagnosis.get("primary_bottleneck")
    return {
        "primary": primary.get("id") if isinstance(primary, dict) else None,
        "findings": {
            f["id"]: {
                "severity": f.get("severity"),
                "weighed_ms": round(float(f.get("weighed_lost_ms") or 0), 3),
            }
            for f in diagnosis.get("bottlenecks") or []
            if not f.get("not_measured")
        },
    }


def _changed(without: dict, with_counters: dict) -> list[str]:
    """How the answers with counters differ from those without: primary, severities, savings."""
    changes = []
    if without["primary"] != with_counters["primary"]:
        changes.append(f"primary {without['primary']} -> {with_counters['primary']}")
    for fid in sorted(set(without["findings"]) | set(with_counters["findings"])):
        a, b = without["findings"].get(fid), with_counters["findings"].get(fid)
        if a is None or b is None:
            present = b or a
            changes.append(
                f"{fid} {'added' if b else 'gone'} ({present['severity']}, {present['weighed_ms']} ms)"
            )
        elif a["severity"] != b["severity"]:
            changes.append(f"{fid} {a['severity']} -> {b['severity']}")
        elif abs(a["weighed_ms"] - b["weighed_ms"]) > max(SAME_SAVING_MS, 0.02 * a["weighed_ms"]):
            changes.append(f"{fid} {a['weighed_ms']} -> {b['weighed_ms']} ms")
    return changes


def plan_row(capture: Path) -> dict:
    """The ncu plan `--mode auto` makes on one capture without its counters, the launches ncu would replay
    (one per launch configuration of the planned kernels, and of every selected kernel), and how the
    answers with the counters differ from those without."""
    import shutil
    import tempfile

    sys.path.insert(0, str(ROOT))
    from hybrid.collect.ncu_plan import plan_ncu
    from hybrid.collect.orchestrate import Orchestrator
    from hybrid.load.ncu_match import select_kernels
    from hybrid.load.nsys_export import load_nsys_export
    from hybrid.pipeline import analyze_run_dir
    from hybrid.rundir import RunDir

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(capture, run, ignore=shutil.ignore_patterns("results*.json", "report*"))
        with_counters = _diagnosis_answers(analyze_run_dir(run))
        shutil.rmtree(run / "ncu")
        analysis = analyze_run_dir(run)
        profile = load_nsys_export(RunDir(run).nsys_export())
    selected = select_kernels(profile.kernels)
    plan = plan_ncu(analysis, profile, selected, forced=False)
    without = _diagnosis_answers(analysis)
    changes = _changed(without, with_counters)
    return {
        "capture": str(capture.relative_to(ROOT)),
        "ncu_runs": plan.run,
        "kernels": len(plan.kernel_names) if plan.kernel_names else None,
        "launches": Orchestrator._launch_configs(profile, plan.kernel_names or selected) if plan.run else 0,
        "launches_all_selected": Orchestrator._launch_configs(profile, selected),
        "reason": plan.reason,
        "movable_ms": plan.movable_ms,
        "headroom_ms": plan.headroom_ms,
        "primary": without["primary"],
        "counters_change": changes,
        # A skip is safe where counters change nothing but findings they add at LOW.
        "skip_safe": not plan.run and all(c.endswith("ms)") and "(LOW" in c for c in changes),
    }


def plans(_args: argparse.Namespace) -> int:
    """plan_row for every committed capture with counters; fails where a skip changed an answer."""
    rows = []
    for capture in sorted(p for pattern in CAPTURES for p in ROOT.glob(pattern) if (p / "ncu").is_dir()):
        rows.append(plan_row(capture))
        print(f"{rows[-1]['capture']}: ncu {'runs' if rows[-1]['ncu_runs'] else 'skipped'}", file=sys.stderr)
    json.dump(rows, sys.stdout, indent=1)
    print()
    return 0 if all(r["ncu_runs"] or r["skip_safe"] for r in rows) else 1


# Replay budgets (seconds) the `budget` command tries on every capture whose plan runs ncu.
BUDGETS_S = (2.0, 3.5, 5.0, 7.0, 10.0)


def _keep_counters_of(csv_path: Path, kernel_names: list[str]) -> tuple[int, int]:
    """Drops the rows of an ncu raw CSV whose kernel is not among `kernel_names` (by the function base name
    ncu matched them on), as if ncu had profiled only those; (rows kept, rows)."""
    import csv

    from nsight.ncu import function_base_name

    bases = {function_base_name(name) for name in kernel_names}
    lines = csv_path.read_text(errors="replace").splitlines(keepends=True)
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID","Process ID"'))
    column = next(csv.reader([lines[head]])).index("Kernel Name")
    kept, rows, kept_rows = lines[: head + 1], 0, 0
    for line in lines[head + 1 :]:
        row = next(csv.reader([line]))
        if row and row[0]:  # a launch's row (the units row has no ID)
            rows += 1
            if function_base_name(row[column]) not in bases:
                continue
            kept_rows += 1
        kept.append(line)
    csv_path.write_text("".join(kept))
    return kept_rows, rows


def budget_rows(capture: Path, budgets_s: tuple[float, ...] = BUDGETS_S) -> list[dict]:
    """For each replay budget in `budgets_s`: the kernels and launches the plan gives ncu within it on this
    capture (decided without its counters), and how the answers with only those kernels' counters differ
    from those with all of them. Empty where the plan skips ncu."""
    import shutil
    import tempfile

    sys.path.insert(0, str(ROOT))
    from hybrid.collect.ncu_plan import plan_ncu
    from hybrid.collect.orchestrate import Orchestrator
    from hybrid.load.ncu_match import select_kernels
    from hybrid.load.nsys_export import load_nsys_export
    from hybrid.pipeline import analyze_run_dir
    from hybrid.rundir import RunDir

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        ignore = shutil.ignore_patterns("results*.json", "report*")
        shutil.copytree(capture, run, ignore=ignore)
        all_counters = _diagnosis_answers(analyze_run_dir(run))
        shutil.rmtree(run / "ncu")
        analysis = analyze_run_dir(run)
        profile = load_nsys_export(RunDir(run).nsys_export())
        candidates = select_kernels(profile.kernels)
        unbudgeted = plan_ncu(analysis, profile, candidates, forced=False)
        if not unbudgeted.run:
            return []
        for budget_s in budgets_s:
            plan = plan_ncu(analysis, profile, candidates, forced=False, budget_s=budget_s)
            names = plan.kernel_names or candidates
            shutil.rmtree(run)
            shutil.copytree(capture, run, ignore=ignore)
            kept, total = _keep_counters_of(run / "ncu" / "counters.csv", names)
            answers = _diagnosis_answers(analyze_run_dir(run))
            rows.append(
                {
                    "capture": str(capture.relative_to(ROOT)),
                    "budget_s": budget_s,
                    "kernels": len(names),
                    "launches": Orchestrator._launch_configs(profile, names),
                    "launches_unbudgeted": Orchestrator._launch_configs(
                        profile, unbudgeted.kernel_names or candidates
                    ),
                    "counter_rows": f"{kept}/{total}",
                    "primary": answers["primary"],
                    "changes": _changed(all_counters, answers),
                }
            )
    return rows


def budget(_args: argparse.Namespace) -> int:
    """budget_rows for every committed capture with counters whose plan runs ncu."""
    rows = []
    for capture in sorted(p for pattern in CAPTURES for p in ROOT.glob(pattern) if (p / "ncu").is_dir()):
        rows += budget_rows(capture)
        print(f"{capture.relative_to(ROOT)}: {len(rows)} rows so far", file=sys.stderr)
    json.dump(rows, sys.stdout, indent=1)
    print()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("measure")
    run.add_argument("--name", required=True)
    run.add_argument("--out", required=True, help="job folder; the diagnosis must write its run to OUT/run")
    run.add_argument("--plain", required=True, help="the workload's own command")
    run.add_argument("--diagnose", required=True, help="the diagnosis (hybrid diagnose/run --out OUT/run)")
    run.add_argument("--gpu", help="the card's name; by default the one the diagnosis's results.json names")
    run.add_argument("--compiled", action="store_true", help="the workload calls torch.compile")
    run.add_argument("--goal", default="any", choices=("any", "make-diagnose-defaults"))
    run.add_argument("--timeout-s", type=float, default=400)
    gather = commands.add_parser("collect")
    gather.add_argument("dirs", nargs="+")
    gather.add_argument("--into", type=Path, help="a cost.json whose invalid rows these replace")
    commands.add_parser("plans", help="the ncu plan of every committed capture with counters")
    commands.add_parser("budget", help="the answers of those whose plan runs ncu, within each replay budget")
    args = parser.parse_args()
    return {"measure": measure, "collect": collect, "plans": plans, "budget": budget}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
