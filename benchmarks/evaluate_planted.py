"""Score the diagnoses of captured planted-suite runs offline, in three modes from one run dir.

Each capture folder holds `run/` (a `hybrid run --mode hybrid` run directory) and the plain passes
`plain_script/inject.json` (not in every capture) and `plain_twin/inject.json` (the fixed twin). The
same artifacts are analyzed as three modes would have seen them: torch-only (torch/ only), nsys
(torch + nsys) and hybrid (torch + nsys + ncu). Each artifact is loaded once; the torch trace
dominates the cost.

    python benchmarks/evaluate_planted.py                        # tests/fixtures/planted -> results
    python benchmarks/evaluate_planted.py --captures DIR [DIR...] --out benchmarks/results

Writes OUT/planted.md and OUT/planted.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from hybrid.pipeline import analyze_artifacts
from hybrid.rules.base import SEVERITY_RANK
from hybrid.rundir import RunDir

MANIFEST = HERE / "planted" / "manifest.json"
DEFAULT_CAPTURES = REPO / "tests" / "fixtures" / "planted"
DEFAULT_OUT = HERE / "results"
MODES = ("torch-only", "nsys", "hybrid")
# Controls must not raise anything at or above this (the manifest's max_severity is the highest allowed).
CONTROL_LIMIT_DEFAULT = "MODERATE"


def load_manifest(path: Path = MANIFEST) -> dict[str, dict]:
    return {entry["name"]: entry for entry in json.loads(path.read_text())["scripts"]}


def analyze_modes(
    run_path: Path, baseline_step_ms: float | None = None, modes: tuple[str, ...] = MODES
) -> dict[str, dict]:
    """results.json documents for each of `modes` the run dir's artifacts allow, loading each once;
    `baseline_step_ms` is the script's plain step time (a plain pass captured beside the run)."""
    from hybrid.load.nsys_export import load_nsys_export
    from hybrid.load.torch_trace import load_torch_trace

    run = RunDir.open(run_path)
    trace, export, csv = run.torch_trace(), run.nsys_export(), run.ncu_csv()
    torch_profile = load_torch_trace(trace) if trace is not None else None
    nsys_profile = load_nsys_export(export) if export is not None else None
    plans = {
        "torch-only": (torch_profile, None, False),
        "nsys": (torch_profile, nsys_profile, False),
        "hybrid": (torch_profile, nsys_profile, True),
    }
    out = {}
    for mode, (tp, npf, with_ncu) in plans.items():
        if (
            mode not in modes
            or (mode == "torch-only" and tp is None)
            or (mode != "torch-only" and npf is None)
            or (with_ncu and csv is None)
        ):
            continue
        # merge() and attach_counters() fill the profile they are given: each mode gets its own copy.
        out[mode] = analyze_artifacts(
            run,
            copy.deepcopy(tp),
            copy.deepcopy(npf),
            csv if with_ncu else None,
            baseline_step_ms=baseline_step_ms,
        )
    return out


def _inject_step_ms(path: Path) -> float | None:
    try:
        return json.loads(path.read_text()).get("step_time_ms")
    except FileNotFoundError:
        return None


def realized_saving(capture: Path) -> dict:
    """Plain script step time minus plain twin step time (wall clock, no profiler). Captures without a
    plain pass of the script fall back to the nsys pass's window time per step (profiler on)."""
    twin = _inject_step_ms(capture / "plain_twin" / "inject.json")
    script = _inject_step_ms(capture / "plain_script" / "inject.json")
    source = "plain pass"
    if script is None:
        script = _inject_step_ms(capture / "run" / "nsys" / "inject.json")
        source = "nsys pass (no plain pass of the script was captured)"
    saving = None if script is None or twin is None else script - twin
    return {
        "script_step_ms": script,
        "twin_step_ms": twin,
        "realized_saving_ms": saving,
        "script_step_source": source,
    }


def verdict(expected: str, results: dict, max_severity: str) -> str:
    findings = results["diagnosis"]["bottlenecks"]
    if expected == "none":
        worst = max((SEVERITY_RANK[f["severity"]] for f in findings if not f["not_measured"]), default=-1)
        return "PASS" if worst <= SEVERITY_RANK[max_severity] else "FALSE ALARM"
    primary = results["diagnosis"]["primary_bottleneck"] or {}
    if primary.get("category") == expected:
        return "PASS"
    return (
        "SECONDARY" if any(f["category"] == expected and not f["not_measured"] for f in findings) else "MISS"
    )


def score_capture(capture: Path, entry: dict) -> dict:
    saving = realized_saving(capture)
    per_mode = {}
    # The fix is measured on plain runs, so the estimate is read at the plain step time when one exists.
    baseline = saving["script_step_ms"] if saving["script_step_source"] == "plain pass" else None
    for mode, results in analyze_modes(capture / "run", baseline).items():
        primary = results["diagnosis"]["primary_bottleneck"] or {}
        findings = [f for f in results["diagnosis"]["bottlenecks"] if not f["not_measured"]]
        est = primary.get("time_lost_baseline_ms", primary.get("time_lost_ms"))
        realized = saving["realized_saving_ms"]
        per_mode[mode] = {
            "verdict": verdict(
                entry["expected_category"], results, entry.get("max_severity", CONTROL_LIMIT_DEFAULT)
            ),
            "primary_category": primary.get("category"),
            "primary_id": primary.get("id"),
            "severity": primary.get("severity"),
            "est_lost_ms": est,
            "est_lost_profiled_ms": primary.get("time_lost_ms"),
            "step_time_ms": results["timing"]["step_time_ms"],
            "est_error_ms": None
            if est is None or realized is None or entry["expected_category"] == "none"
            else est - realized,
            "findings": [
                [f["id"], f["category"], f["severity"], round(f["time_lost_ms"], 3)] for f in findings
            ],
        }
    return {"name": capture.name, "expected": entry["expected_category"], **saving, "modes": per_mode}


# The goal for estimated vs realized savings.
ESTIMATE_TOLERANCE = 0.30


def best_mode(row: dict) -> str | None:
    """The mode with the most data among those scored for a capture (hybrid, else nsys, else torch-only)."""
    return next((mode for mode in ("hybrid", "nsys", "torch-only") if mode in row["modes"]), None)


def _fmt(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_markdown(rows: list[dict], commands: list[str], notes: list[str]) -> str:
    lines = [
        "# Planted-bottleneck suite: offline diagnosis of the H200 captures",
        "",
        "Captured on one H200 with (per script, from each capture's job.log):",
        "",
        "```",
        *commands,
        "```",
        "",
        "Scored with:",
        "",
        "```",
        f"python benchmarks/evaluate_planted.py {' '.join(sys.argv[1:])}".strip(),
        "```",
        "",
    ]
    for mode in MODES:
        scored = [r for r in rows if mode in r["modes"]]
        hits = sum(r["modes"][mode]["verdict"] == "PASS" for r in scored)
        lines.append(f"- `{mode}`: {hits}/{len(scored)} PASS")
    within = [
        abs(m["est_error_ms"]) <= ESTIMATE_TOLERANCE * r["realized_saving_ms"]
        for r in rows
        for mode, m in r["modes"].items()
        if mode == best_mode(r) and m["est_error_ms"] is not None and (r["realized_saving_ms"] or 0) > 0
    ]
    lines.append(
        f"- primary estimate within ±{ESTIMATE_TOLERANCE:.0%} of the realized saving (most informed mode "
        f"per script, positive savings): {sum(within)}/{len(within)}"
    )
    legend = (
        "`est` is the primary finding's estimated ms/step at the plain step time "
        "(`time_lost_baseline_ms`: the same share of the plain step; `profiled` is the figure on "
        "the profiled timeline); `realized` is the plain script's step "
        "time minus its fixed twin's (wall clock, no profiler; * = the script's nsys-pass step time, "
        "no plain pass of it was captured); `err` = est - realized."
    )
    lines += [
        "",
        legend,
        "",
        (
            "| script | expected | mode | primary (severity) | verdict | step ms | profiled est ms | est ms "
            "| realized ms | err ms |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        star = "" if row["script_step_source"] == "plain pass" else "*"
        for mode, m in row["modes"].items():
            found = f"{m['primary_category'] or 'none'} ({m['severity'] or '-'})"
            lines.append(
                f"| {row['name']} | {row['expected']} | {mode} | {found} | {m['verdict']} "
                f"| {_fmt(m['step_time_ms'])} | {_fmt(m.get('est_lost_profiled_ms'))} "
                f"| {_fmt(m['est_lost_ms'])} "
                f"| {_fmt(row['realized_saving_ms'])}{star} | {_fmt(m['est_error_ms'])} |"
            )
    lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


def capture_commands(captures: list[Path]) -> list[str]:
    out = []
    for capture in captures:
        log = capture / "job.log"
        if log.is_file():
            out += [line[2:] for line in log.read_text().splitlines() if line.startswith("$ ")]
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--captures",
        type=Path,
        nargs="+",
        default=[DEFAULT_CAPTURES],
        help="folders holding one capture folder per planted script",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--notes", type=Path, default=None, help="markdown appended under Notes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    manifest = load_manifest()
    captures = sorted(
        (c for root in args.captures for c in root.iterdir() if c.name in manifest and (c / "run").is_dir()),
        key=lambda c: c.name,
    )
    rows = []
    for capture in captures:
        print(f"scoring {capture.name} ...", file=sys.stderr, flush=True)
        rows.append(score_capture(capture, manifest[capture.name]))
    notes = args.notes.read_text().splitlines() if args.notes else []
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {
        mode: {
            "pass": sum(r["modes"].get(mode, {}).get("verdict") == "PASS" for r in rows),
            "scored": sum(mode in r["modes"] for r in rows),
        }
        for mode in MODES
    }
    document = {
        "command": shlex.join(["python", "benchmarks/evaluate_planted.py", *(argv or sys.argv[1:])]),
        "capture_commands": capture_commands(captures),
        "hit_rate": summary,
        "rows": rows,
    }
    (args.out / "planted.json").write_text(json.dumps(document, indent=1) + "\n")
    (args.out / "planted.md").write_text(render_markdown(rows, capture_commands(captures), notes))
    print(f"wrote {args.out / 'planted.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
