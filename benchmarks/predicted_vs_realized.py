"""Predicted against realized saving of one fix: the saving a `hybrid run` directory's finding predicts
(its time lost at the plain step where there is one), and the saving the fix realized, the plain step of the
script minus the plain step of its fixed twin (each `python -m hybrid.inject.script --pass plain`'s
inject.json). Prints one row, and the calibration pass's cost and what it measured.

    python benchmarks/predicted_vs_realized.py RUN_DIR --finding tensor.fp32_gemm \
        [--plain-script PLAIN_SCRIPT_DIR --plain-twin PLAIN_TWIN_DIR]

Without the plain folders (a control with no fixed twin) it prints the finding's prediction alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _step_ms(folder: Path) -> float:
    return float(json.loads((folder / "inject.json").read_text())["step_time_ms"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--plain-script", type=Path, default=None)
    parser.add_argument("--plain-twin", type=Path, default=None)
    parser.add_argument("--finding", required=True, help="the finding id whose fix the twin applies")
    args = parser.parse_args()
    results = json.loads((args.run_dir / "results.json").read_text())
    calibration = next((p for p in results.get("passes") or [] if p["name"] == "calibration"), None)
    print(
        "calibration pass:",
        json.dumps({k: (calibration or {}).get(k) for k in ("status", "wall_s", "contributed", "message")}),
    )
    findings = {f["id"]: f for f in results["diagnosis"]["bottlenecks"]}
    primary = (results["diagnosis"].get("primary_bottleneck") or {}).get("id")
    finding = findings.get(args.finding)
    if finding is None:
        print(f"{args.finding}: no such finding (primary {primary})")
        return 0 if args.plain_twin is None else 1
    predicted = finding.get("time_lost_baseline_ms", finding["time_lost_ms"])
    method = finding.get("time_lost_method")
    row = f"{args.finding} ({method}, primary {primary}): predicted {predicted:.3f} ms/step"
    if args.plain_script and args.plain_twin:
        before, after = _step_ms(args.plain_script), _step_ms(args.plain_twin)
        realized = before - after
        error = 100.0 * (predicted - realized) / realized if realized else float("nan")
        row += f", realized {realized:.3f} ({before:.3f} -> {after:.3f} plain), error {error:+.1f}%"
    print(row)
    print("basis:", (finding.get("replay") or {}).get("basis") or finding.get("replay_reason"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
