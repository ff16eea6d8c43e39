"""Predicted vs realized savings of the replay on planted-suite captures, offline.

For each capture folder (run/ from `hybrid run --mode hybrid`, plain_script/ and plain_twin/ plain
passes of the script and its fixed twin, see tests/fixtures/planted/README.md): the full analysis
with the replay, fitted to the plain step time of the script; predicted = the primary finding's
replayed saving at that step time; realized = plain script - plain twin. A calibration.json in the
capture folder or its run/ (python -m hybrid.replay.calibrate) supplies the speedups measured on the
GPU; without one, TENSOR_CORE findings keep the rule's closed form.

    python benchmarks/evaluate_replay.py                                  # tests/fixtures/planted
    python benchmarks/evaluate_replay.py --captures DIR [DIR...] --out benchmarks/results

Writes OUT/replay_planted.md and OUT/replay_planted.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from benchmarks.evaluate_planted import load_manifest, realized_saving
from hybrid.pipeline import analyze_artifacts
from hybrid.replay.predict import replay_findings
from hybrid.rundir import RunDir

DEFAULT_CAPTURES = REPO / "tests" / "fixtures" / "planted"
DEFAULT_OUT = HERE / "results"
TOLERANCE = 0.20


def _calibration(capture: Path) -> dict | None:
    for path in (capture / "calibration.json", capture / "run" / "calibration.json"):
        if path.is_file():
            return json.loads(path.read_text())
    return None


def evaluate(capture: Path, entry: dict) -> dict:
    from hybrid.nsys_pass import load_nsys_export
    from hybrid.torch_pass import load_torch_trace

    saving = realized_saving(capture)
    plain = saving["script_step_ms"] if saving["script_step_source"] == "plain pass" else None
    run = RunDir.open(capture / "run")
    torch_profile = load_torch_trace(run.torch_trace()) if run.torch_trace() else None
    nsys_profile = load_nsys_export(run.nsys_export())
    results = analyze_artifacts(run, torch_profile, nsys_profile, run.ncu_csv(), baseline_step_ms=plain)
    # analyze_artifacts merged the profiles into nsys_profile.
    replay_findings(nsys_profile, results, baseline_step_ms=plain, calibration=_calibration(capture))
    primary = results["diagnosis"]["primary_bottleneck"] or {}
    expected = entry["expected_category"]
    planted = max((f for f in results["diagnosis"]["bottlenecks"] if f["category"] == expected),
                  key=lambda f: f.get("time_lost_baseline_ms", f["time_lost_ms"]), default=None)
    predicted = None if planted is None else planted.get("time_lost_baseline_ms", planted["time_lost_ms"])
    realized = saving["realized_saving_ms"]
    timing = results["timing"]
    return {
        "name": capture.name, "expected": expected, **saving,
        "step_time_ms": timing["step_time_ms"], "replay_step_time_ms": timing["replay_step_time_ms"],
        "replay_baseline_step_time_ms": timing.get("replay_baseline_step_time_ms"),
        "host_scale": timing.get("replay_host_scale"),
        "primary_id": primary.get("id"), "primary_category": primary.get("category"),
        "primary_method": primary.get("time_lost_method"),
        "planted_id": None if planted is None else planted["id"],
        "planted_method": None if planted is None else planted.get("time_lost_method"),
        "planted_basis": None if planted is None else (planted.get("replay") or {}).get("basis"),
        "predicted_ms": predicted, "realized_ms": realized,
        "within": None if predicted is None or not realized or realized <= 0 or expected == "none"
        else abs(predicted - realized) <= TOLERANCE * realized,
        "primary_is_planted": None if expected == "none" else primary.get("category") == expected,
        "findings": [[f["id"], f.get("time_lost_method"), round(f.get("time_lost_baseline_ms", f["time_lost_ms"]), 2)]
                     for f in results["diagnosis"]["bottlenecks"] if not f.get("not_measured")],
        "all_fixes": results["diagnosis"].get("replay_all_fixes"),
    }


def _fmt(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(rows: list[dict], command: str) -> str:
    scored = [r for r in rows if r["within"] is not None]
    replayed = [r for r in scored if r["planted_method"] == "replay"]
    primaries = [r for r in rows if r["primary_is_planted"] is not None]
    lines = ["# Replay: predicted vs realized savings on the planted suite (H200 captures)", "",
             "```", command, "```", "",
             (f"- planted finding's prediction within ±{TOLERANCE:.0%} of the realized saving: "
             f"{sum(r['within'] for r in scored)}/{len(scored)} "
             f"(replayed: {sum(r['within'] for r in replayed)}/{len(replayed)})"),
             (f"- the primary (largest predicted saving) is the planted fix: "
             f"{sum(r['primary_is_planted'] for r in primaries)}/{len(primaries)}"), "",
             ("`predicted` is the planted category's finding's saving replayed at the plain step time of the "
             "script (host time fitted, `host x`); `realized` = plain script - plain twin (wall clock, no "
             "profiler). `method` is replay or model (the rule's closed form, where no transformation or no "
             "measured speedup exists)."), "",
             ("| script | expected | primary | planted finding (method) | step ms nsys / plain | host x "
             "| predicted ms | realized ms | within ±20% |"), "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['expected']} | {r['primary_id'] or 'none'} | {r['planted_id'] or '-'} "
            f"({r['planted_method'] or '-'}) | {_fmt(r['step_time_ms'])} / {_fmt(r['script_step_ms'])} "
            f"| {_fmt(r['host_scale'])} | {_fmt(r['predicted_ms'])} | {_fmt(r['realized_ms'])} "
            f"| {'-' if r['within'] is None else ('yes' if r['within'] else 'no')} |")
    lines += ["", "Speedup basis of each replayed planted finding:", ""]
    lines += [f"- {r['name']}: {r['planted_basis']}" for r in rows if r["planted_basis"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captures", type=Path, nargs="+", default=[DEFAULT_CAPTURES])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    manifest = load_manifest()
    captures = sorted((c for root in args.captures for c in root.iterdir()
                       if c.name in manifest and (c / "run" / "nsys").is_dir()), key=lambda c: c.name)
    rows = []
    for capture in captures:
        print(f"replaying {capture.name} ...", file=sys.stderr, flush=True)
        rows.append(evaluate(capture, manifest[capture.name]))
    command = shlex.join(["python", "benchmarks/evaluate_replay.py", *(argv if argv is not None else sys.argv[1:])])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replay_planted.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
    (args.out / "replay_planted.md").write_text(render(rows, command))
    print(f"wrote {args.out / 'replay_planted.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
