"""Predicted vs realized savings of the replay on planted-suite captures, offline.

For each capture folder (run/ from `hybrid run --mode hybrid`, plain_script/ and plain_twin/ plain
passes of the script and its fixed twin, see tests/fixtures/planted/README.md): the full analysis
with the replay, fitted to the plain step time of the script; predicted = the saving replayed at
that step time for the finding of the planted category; realized = plain script - plain twin. A
calibration.json in the capture folder (python -m hybrid.collect.calibrate_run) supplies the speedups
measured on the GPU; without one, TENSOR_CORE findings keep the rule's closed form. A second table
replays resnet50 b32 fp32 with TF32 and bf16 against plain passes of each (--precision-*).

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
from hybrid.rundir import RunDir

DEFAULT_CAPTURES = REPO / "tests" / "fixtures" / "planted"
# resnet50 b32 fp32 capture, and a folder with plain_<precision>/inject.json and calibration.json for it.
DEFAULT_PRECISION_RUN = REPO / "tests" / "fixtures" / "runs" / "h200-resnet50"
DEFAULT_PRECISION_DATA = REPO / "tests" / "fixtures" / "runs" / "h200-resnet50-precision"
PRECISION_FIXES = {"tf32": "tf32", "bf16-amp": "bf16"}
DEFAULT_OUT = HERE / "results"
TOLERANCE = 0.20


def _calibration(capture: Path) -> dict | None:
    for path in (capture / "calibration.json", capture / "run" / "calibration.json"):
        if path.is_file():
            return json.loads(path.read_text())
    return None


def evaluate(capture: Path, entry: dict) -> dict:
    from hybrid.load.nsys_export import load_nsys_export
    from hybrid.load.torch_trace import load_torch_trace

    saving = realized_saving(capture)
    plain = saving["script_step_ms"] if saving["script_step_source"] == "plain pass" else None
    run = RunDir.open(capture / "run")
    torch_profile = load_torch_trace(run.torch_trace()) if run.torch_trace() else None
    nsys_profile = load_nsys_export(run.nsys_export())
    results = analyze_artifacts(
        run,
        torch_profile,
        nsys_profile,
        run.ncu_csv(),
        baseline_step_ms=plain,
        calibration=_calibration(capture),
    )
    primary = results["diagnosis"]["primary_bottleneck"] or {}
    expected = entry["expected_category"]
    planted = max(
        (f for f in results["diagnosis"]["bottlenecks"] if f["category"] == expected),
        key=lambda f: f.get("time_lost_baseline_ms", f["time_lost_ms"]),
        default=None,
    )
    predicted = None if planted is None else planted.get("time_lost_baseline_ms", planted["time_lost_ms"])
    realized = saving["realized_saving_ms"]
    timing = results["timing"]
    return {
        "name": capture.name,
        "expected": expected,
        **saving,
        "step_time_ms": timing["step_time_ms"],
        "replay_step_time_ms": timing["replay_step_time_ms"],
        "replay_baseline_step_time_ms": timing.get("replay_baseline_step_time_ms"),
        "host_scale": timing.get("replay_host_scale"),
        "primary_id": primary.get("id"),
        "primary_category": primary.get("category"),
        "primary_method": primary.get("time_lost_method"),
        "planted_id": None if planted is None else planted["id"],
        "planted_method": None if planted is None else planted.get("time_lost_method"),
        "planted_basis": None if planted is None else (planted.get("replay") or {}).get("basis"),
        "predicted_ms": predicted,
        "realized_ms": realized,
        "within": None
        if predicted is None or not realized or realized <= 0 or expected == "none"
        else abs(predicted - realized) <= TOLERANCE * realized,
        "primary_is_planted": None if expected == "none" else primary.get("category") == expected,
        "findings": [
            [f["id"], f.get("time_lost_method"), round(f.get("time_lost_baseline_ms", f["time_lost_ms"]), 2)]
            for f in results["diagnosis"]["bottlenecks"]
            if not f.get("not_measured")
        ],
        "all_fixes": results["diagnosis"].get("replay_all_fixes"),
    }


def precision_rows(run_path: Path, data_path: Path) -> list[dict]:
    """resnet50 fp32 -> TF32 and -> bf16 autocast: the fp32 capture replayed with the GEMM/conv
    speedups measured on the GPU, fitted to the plain fp32 step, against the plain runs of each."""
    from hybrid.load.nsys_export import load_nsys_export
    from hybrid.replay.choose import calibrated_speedup
    from hybrid.replay.graph import build_graph
    from hybrid.replay.predict import fit_host_scale
    from hybrid.replay.simulate import replay_step
    from hybrid.replay.transforms import apply, host_scaled
    from hybrid.rules.base import Fix

    calibration, plain = _calibration(data_path), {}
    for precision in ("fp32", *PRECISION_FIXES):
        path = data_path / f"plain_{precision}" / "inject.json"
        if path.is_file():
            plain[precision] = json.loads(path.read_text())["step_time_ms"]
    if calibration is None or "fp32" not in plain:
        return []
    graph = build_graph(load_nsys_export(RunDir.open(run_path).nsys_export()))
    fit = fit_host_scale(graph, plain["fp32"])
    rows = []
    for precision, variant in PRECISION_FIXES.items():
        found = calibrated_speedup(calibration, "fp32", variant)
        if found is None or precision not in plain:
            continue
        fix = Fix("faster_gemms", precision, {"speedup": found[0], "precisions": ("fp32",)}, found[1])
        predicted = fit.step_ms - replay_step(apply(host_scaled(graph, fit.scale), fix)).step_time_ms
        realized = plain["fp32"] - plain[precision]
        rows.append(
            {
                "run": run_path.name,
                "fix": precision,
                "speedup": found[0],
                "basis": found[1],
                "plain_fp32_ms": plain["fp32"],
                "fitted_ms": fit.step_ms,
                "plain_fixed_ms": plain[precision],
                "predicted_ms": predicted,
                "realized_ms": realized,
                "within": abs(predicted - realized) <= TOLERANCE * realized if realized > 0 else None,
            }
        )
    return rows


def _fmt(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(rows: list[dict], command: str, precision: list[dict] | None = None) -> str:
    scored = [r for r in rows if r["within"] is not None]
    replayed = [r for r in scored if r["planted_method"] == "replay"]
    primaries = [r for r in rows if r["primary_is_planted"] is not None]
    lines = [
        "# Replay: predicted vs realized savings on the planted suite (H200 captures)",
        "",
        "```",
        command,
        "```",
        "",
        (
            f"- planted finding's prediction within ±{TOLERANCE:.0%} of the realized saving: "
            f"{sum(r['within'] for r in scored)}/{len(scored)} "
            f"(replayed: {sum(r['within'] for r in replayed)}/{len(replayed)})"
        ),
        (
            f"- the primary (largest predicted saving) is the planted fix: "
            f"{sum(r['primary_is_planted'] for r in primaries)}/{len(primaries)}"
        ),
        "",
        (
            "`predicted` is the planted category's finding's saving replayed at the plain step time of the "
            "script (host time fitted, `host x`); `realized` = plain script - plain twin (wall clock, no "
            "profiler). `method` is replay or model (the rule's closed form, where no transformation or no "
            "measured speedup exists)."
        ),
        "",
        (
            "| script | expected | primary | planted finding (method) | step ms nsys / plain | host x "
            "| predicted ms | realized ms | within ±20% |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['expected']} | {r['primary_id'] or 'none'} | {r['planted_id'] or '-'} "
            f"({r['planted_method'] or '-'}) | {_fmt(r['step_time_ms'])} / {_fmt(r['script_step_ms'])} "
            f"| {_fmt(r['host_scale'])} | {_fmt(r['predicted_ms'])} | {_fmt(r['realized_ms'])} "
            f"| {'-' if r['within'] is None else ('yes' if r['within'] else 'no')} |"
        )
    lines += ["", "Speedup basis of each replayed planted finding:", ""]
    lines += [f"- {r['name']}: {r['planted_basis']}" for r in rows if r["planted_basis"]]
    if precision:
        lines += [
            "",
            "## resnet50 b32: fp32 -> TF32 and -> bf16 autocast",
            "",
            (
                "The fp32 capture replayed with every fp32 GEMM/convolution kernel shortened by the speedup "
                "measured on the GPU for the capture's top shapes (bf16 autocast also halves the bytes of "
                "elementwise kernels, which the replay leaves as they are); realized = plain fp32 - "
                "plain run of the other precision, in the same GPU call."
            ),
            "",
            (
                "| fix | measured speedup | plain fp32 ms (replay fitted) | plain fixed ms | predicted ms "
                "| realized ms | within ±20% |"
            ),
            "|---|---|---|---|---|---|---|",
        ]
        for r in precision:
            lines.append(
                f"| {r['fix']} | {r['speedup']:.2f}x | {r['plain_fp32_ms']:.2f} ({r['fitted_ms']:.2f}) "
                f"| {r['plain_fixed_ms']:.2f} | {r['predicted_ms']:.2f} | {r['realized_ms']:.2f} "
                f"| {'-' if r['within'] is None else ('yes' if r['within'] else 'no')} |"
            )
        lines += ["", *[f"- {r['fix']}: {r['basis']}" for r in precision]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captures", type=Path, nargs="+", default=[DEFAULT_CAPTURES])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--precision-run",
        type=Path,
        default=DEFAULT_PRECISION_RUN,
        help="an fp32 run directory (resnet50 b32) to replay with TF32 and bf16",
    )
    parser.add_argument(
        "--precision-data",
        type=Path,
        default=DEFAULT_PRECISION_DATA,
        help="its plain_<precision>/inject.json passes and calibration.json",
    )
    args = parser.parse_args(argv)
    manifest = load_manifest()
    captures = sorted(
        (
            c
            for root in args.captures
            for c in root.iterdir()
            if c.name in manifest and (c / "run" / "nsys").is_dir()
        ),
        key=lambda c: c.name,
    )
    rows = []
    for capture in captures:
        print(f"replaying {capture.name} ...", file=sys.stderr, flush=True)
        rows.append(evaluate(capture, manifest[capture.name]))
    command = shlex.join(
        ["python", "benchmarks/evaluate_replay.py", *(argv if argv is not None else sys.argv[1:])]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    precision = precision_rows(args.precision_run, args.precision_data)
    (args.out / "replay_planted.json").write_text(
        json.dumps({"command": command, "rows": rows, "precision": precision}, indent=1) + "\n"
    )
    (args.out / "replay_planted.md").write_text(render(rows, command, precision))
    print(f"wrote {args.out / 'replay_planted.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
