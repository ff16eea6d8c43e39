"""Run the planted-bottleneck suite through `hybrid run` and score the diagnoses.

For every script of benchmarks/planted/manifest.json (and its fixed twin) and every mode, runs
`python -m hybrid run --mode M --baseline --json --out RUN_DIR script.py`, then compares the
primary finding with the planted category, and the script's step time with its twin's (the
saving realized by the fix) next to the time the primary finding estimated it costs.

    python benchmarks/run_planted.py                          # all scripts, modes hybrid,nsys,torch
    python benchmarks/run_planted.py --only graph_breaks --modes torch
    python benchmarks/run_planted.py --device cpu --modes torch --warmup 1 --steps 2   # smoke test

Writes OUT/planted_<mode>.md and .json (default OUT: benchmarks/results), the run directories
under OUT/runs/<mode>/, and keeps going when one script fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PLANTED_DIR = HERE / "planted"
MANIFEST = PLANTED_DIR / "manifest.json"
DEFAULT_OUT = HERE / "results"
MODES = ("hybrid", "nsys", "torch")
DEVICE_ENV = "PLANTED_DEVICE"  # read by benchmarks/planted/_planted.py
SEVERITY_RANK = {"CRITICAL": 3, "SEVERE": 2, "MODERATE": 1, "LOW": 0}  # as hybrid.rules.base
# A full hybrid-mode run (plain + torch + nsys + ncu replay of the top kernels) of a < 30 s script
# stays well under this on an H200; past it the run is recorded as failed and the suite goes on.
RUN_TIMEOUT_S = 900
STDERR_TAIL_CHARS = 2000


def load_manifest(path: Path = MANIFEST) -> list[dict]:
    return json.loads(path.read_text())["scripts"]


def hybrid_command(script: Path, mode: str, run_dir: Path, warmup: int, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hybrid",
        "run",
        "--mode",
        mode,
        "--out",
        str(run_dir),
        "--warmup",
        str(warmup),
        "--steps",
        str(steps),
        "--baseline",
        "--json",
        "--quiet",
        str(script),
    ]


def run_one(
    script: Path, mode: str, run_dir: Path, *, warmup: int, steps: int, device: str | None, timeout_s: float
) -> dict:
    """Profile one script; never raises for a failing script, returns what happened instead."""
    command = hybrid_command(script, mode, run_dir, warmup, steps)
    # hybrid never reuses a run directory: a rerun of the suite replaces this script's previous one.
    shutil.rmtree(run_dir, ignore_errors=True)
    env = dict(os.environ)
    if device:
        env[DEVICE_ENV] = device
    started = time.monotonic()
    try:
        proc = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        exit_code, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as expired:
        exit_code = None
        stderr = f"timed out after {timeout_s:.0f} s\n{expired.stderr or ''}"
    outcome = {
        "command": shlex.join(command),
        "exit_code": exit_code,
        "wall_s": round(time.monotonic() - started, 2),
        "results": None,
        "error": None,
    }
    results_path = run_dir / "results.json"
    # Exit 1 means "done, and a finding reached --fail-on": still a complete analysis.
    if exit_code in (0, 1) and results_path.exists():
        outcome["results"] = json.loads(results_path.read_text())
    else:
        tail = stderr if isinstance(stderr, str) else stderr.decode(errors="replace")
        outcome["error"] = tail[-STDERR_TAIL_CHARS:].strip() or f"exit code {exit_code}, no results.json"
    return outcome


def _step_time(results: dict) -> tuple[float | None, str]:
    """Step time without a profiler (the plain pass) when there is one, else the fastest pass's."""
    passes = {p.get("name"): p for p in results.get("passes", [])}
    plain = passes.get("plain", {})
    if plain.get("step_time_ms"):
        return plain["step_time_ms"], "measured: wall clock, plain pass (no profiler)"
    timed = [p for p in passes.values() if p.get("step_time_ms")]
    if timed:
        best = min(timed, key=lambda p: p["step_time_ms"])
        return best["step_time_ms"], f"measured: wall clock, {best['name']} pass (profiler on)"
    return results.get("timing", {}).get("step_time_ms"), "measured: results.json timing"


def summarize(results: dict | None) -> dict:
    """The parts of one results.json the comparison needs."""
    if results is None:
        return {"ok": False}
    primary = results.get("diagnosis", {}).get("primary_bottleneck") or {}
    findings = results.get("diagnosis", {}).get("bottlenecks", [])
    step_ms, step_source = _step_time(results)
    evidence_sources = sorted({e.get("source") for e in primary.get("evidence", []) if e.get("source")})
    return {
        "ok": True,
        "mode": results.get("mode"),
        "primary_category": primary.get("category"),
        "primary_id": primary.get("id"),
        "primary_severity": primary.get("severity"),
        # The finding's own figure: an estimate of what fixing it would save.
        "time_lost_ms": primary.get("time_lost_ms"),
        "time_lost_pct": primary.get("time_lost_pct"),
        "evidence_sources": evidence_sources,
        "max_severity": max((f.get("severity") for f in findings), key=SEVERITY_RANK.get, default=None),
        "categories": [f.get("category") for f in findings],
        "step_time_ms": step_ms,
        "step_time_source": step_source,
        "pass_wall_s": {p.get("name"): p.get("wall_s") for p in results.get("passes", [])},
    }


def score(entry: dict, script: dict, twin: dict | None) -> dict:
    """Expected vs found, and the saving the fix realized next to the saving the finding estimated."""
    expected = entry["expected_category"]
    row = {"name": entry["name"], "expected": expected, "script": script, "twin": twin}
    if not script["ok"]:
        row["verdict"] = "FAILED"
        return row
    if expected == "none":
        limit = SEVERITY_RANK[entry.get("max_severity", "MODERATE")]
        worst = script["max_severity"]
        row["verdict"] = "PASS" if worst is None or SEVERITY_RANK[worst] <= limit else "FALSE ALARM"
        return row
    found = script["primary_category"]
    row["verdict"] = (
        "PASS" if found == expected else "SECONDARY" if expected in script["categories"] else "MISS"
    )
    if twin and twin["ok"] and script["step_time_ms"] and twin["step_time_ms"]:
        saved = script["step_time_ms"] - twin["step_time_ms"]
        row["realized_saving_ms"] = round(saved, 3)
        row["realized_saving_pct"] = round(100.0 * saved / script["step_time_ms"], 1)
    return row


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _cell(text: str) -> str:
    """Table cells carry program output (error text): keep them on one line and pipe-free."""
    return " ".join(str(text).split()).replace("|", "\\|")


def render_markdown(mode: str, command: str, rows: list[dict]) -> str:
    passed = sum(r["verdict"] == "PASS" for r in rows)
    lines = [
        f"# Planted-bottleneck suite, mode `{mode}`",
        "",
        "```",
        command,
        "```",
        "",
        f"{passed}/{len(rows)} diagnosed as planted (healthy controls: no finding above their limit).",
        "Step times are measured wall clock (plain pass without profiler when present, see JSON);",
        "`est. lost` is the primary finding's own estimate of the time the problem costs;",
        "`realized` is the script's step time minus its fixed twin's.",
        "",
        (
            "| script | expected | found (severity) | verdict | step ms | twin ms | realized ms (%) "
            "| est. lost ms (%) | evidence sources | twin found | pass wall s |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        script, twin = row["script"], row["twin"] or {}
        if not script["ok"]:
            error = _cell(script.get("error") or "")[:200]
            lines.append(
                f"| {row['name']} | {row['expected']} | failed: {error} | FAILED "
                "| - | - | - | - | - | - | - |"
            )
            continue
        found = f"{script['primary_category'] or 'none'} ({script['primary_severity'] or '-'})"
        realized = (
            f"{_fmt(row.get('realized_saving_ms'))} ({_fmt(row.get('realized_saving_pct'), 1)})"
            if "realized_saving_ms" in row
            else "-"
        )
        lost = f"{_fmt(script['time_lost_ms'])} ({_fmt(script['time_lost_pct'], 1)})"
        twin_found = (
            f"{twin.get('primary_category') or 'none'} ({twin.get('primary_severity') or '-'})"
            if twin.get("ok")
            else ("failed" if row["twin"] else "-")
        )
        walls = ", ".join(f"{name} {_fmt(s, 1)}" for name, s in script["pass_wall_s"].items())
        lines.append(
            f"| {row['name']} | {row['expected']} | {found} | {row['verdict']} "
            f"| {_fmt(script['step_time_ms'])} | {_fmt(twin.get('step_time_ms'))} | {realized} | {lost} "
            f"| {', '.join(script['evidence_sources']) or '-'} | {twin_found} | {walls} |"
        )
    return "\n".join(lines) + "\n"


def _summary_with_error(outcome: dict) -> dict:
    summary = summarize(outcome["results"])
    summary.update(
        command=outcome["command"],
        exit_code=outcome["exit_code"],
        wall_s=outcome["wall_s"],
        error=outcome["error"],
    )
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--manifest", type=Path, default=MANIFEST, help="suite description; scripts are found next to it"
    )
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)} (default: all)"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this manifest entry (repeatable)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where reports and run dirs go")
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="force the scripts' device (cpu: small sizes, a smoke test)",
    )
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--no-twins", action="store_true", help="skip the fixed twins")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per hybrid run")
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; use {', '.join(MODES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([sys.executable, *sys.argv] if argv is None else [sys.executable, __file__, *argv])
    entries = load_manifest(args.manifest)
    script_dir = args.manifest.resolve().parent
    if args.only:
        known = {e["name"] for e in entries}
        missing = [name for name in args.only if name not in known]
        if missing:
            print(
                f"unknown script(s) {', '.join(missing)}; manifest has: {', '.join(sorted(known))}",
                file=sys.stderr,
            )
            return 2
        entries = [e for e in entries if e["name"] in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    for mode in args.modes:
        rows = []
        for entry in entries:
            summaries = {}
            for role in ("script", "twin"):
                file_name = entry[role]
                if file_name is None or (role == "twin" and args.no_twins):
                    summaries[role] = None
                    continue
                run_dir = args.out / "runs" / mode / Path(file_name).stem
                print(f"[{mode}] {file_name} ...", file=sys.stderr, flush=True)
                outcome = run_one(
                    script_dir / file_name,
                    mode,
                    run_dir,
                    warmup=args.warmup,
                    steps=args.steps,
                    device=args.device,
                    timeout_s=args.timeout,
                )
                summaries[role] = _summary_with_error(outcome)
                status = "ok" if outcome["results"] else f"FAILED (exit {outcome['exit_code']})"
                print(f"[{mode}] {file_name}: {status} in {outcome['wall_s']:.1f} s", file=sys.stderr)
            rows.append(score(entry, summaries["script"], summaries["twin"]))
        report = {
            "mode": mode,
            "command": command,
            "device": args.device or "auto",
            "warmup": args.warmup,
            "steps": args.steps,
            "rows": rows,
        }
        (args.out / f"planted_{mode}.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / f"planted_{mode}.md").write_text(render_markdown(mode, command, rows))
        print(f"wrote {args.out / f'planted_{mode}.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
