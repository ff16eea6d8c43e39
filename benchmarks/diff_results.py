"""Re-analyze every committed capture and store (or compare against) a canonical results.json per
capture: the proof that a refactor leaves what users read unchanged.

    python benchmarks/diff_results.py save /tmp/results-before     # before the change
    python benchmarks/diff_results.py diff /tmp/results-before     # after it: lists every difference

Each capture is analyzed in a scratch copy, whatever the analysis may write. Canonical form:
keys sorted, floats rounded to 9 significant digits (a reordered sum moves the last bits), fields
that are no property of the capture (the Python version, the analysis's own directory) dropped."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
# Fields that depend on the machine re-analyzing, not on the capture.
VOLATILE = (("tools", "python"),)


def captures() -> list[Path]:
    # A folder of runs (h200-resnet50-precision holds one per precision) is no capture itself.
    runs = sorted(p.parent for p in (FIXTURES / "runs").glob("**/run.json"))
    jobs = sorted(p for p in (FIXTURES / "jobs").iterdir() if p.is_dir())
    single = [
        *FIXTURES.glob("planted/*/run"),
        *FIXTURES.glob("callsites/planted/*/run"),
        *FIXTURES.glob("precision/*/run"),
        *FIXTURES.glob("unmarked_runs/*/run"),
        *FIXTURES.glob("verify/*/run"),
    ]
    return sorted(single) + runs + jobs


def name_of(capture: Path) -> str:
    return "__".join(capture.relative_to(FIXTURES).parts)


def _rounded(value: object) -> object:
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def canonical(results: dict) -> str:
    for path in VOLATILE:
        holder = results
        for key in path[:-1]:
            holder = holder.get(key) or {}
        if isinstance(holder, dict):
            holder.pop(path[-1], None)
    return json.dumps(_rounded(results), sort_keys=True, indent=1, default=str) + "\n"


def analyze(capture: Path) -> tuple[str, str]:
    from hybrid.analysis.job_metrics import is_job_dir
    from hybrid.pipeline import analyze_run_dir

    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / capture.name
        shutil.copytree(capture, copy)
        try:
            if is_job_dir(copy):
                from hybrid.pipeline import analyze_job

                results = analyze_job(copy)
            else:
                results = analyze_run_dir(copy)
        except Exception as error:  # noqa: BLE001 - a capture that stops analyzing is a difference to list
            return name_of(capture), f"FAILED: {type(error).__name__}: {error}\n".replace(scratch, "SCRATCH")
        # Warnings name files by their path, here the scratch copy's.
        return name_of(capture), canonical(results).replace(scratch, "SCRATCH")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("save", "diff"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="analyze only captures whose name contains this")
    args = parser.parse_args()
    todo = [c for c in captures() if args.only in name_of(c)]
    with ProcessPoolExecutor(args.jobs) as pool:
        outputs = dict(pool.map(analyze, todo))
    if args.action == "save":
        args.folder.mkdir(parents=True, exist_ok=True)
        for name, text in outputs.items():
            (args.folder / f"{name}.json").write_text(text, encoding="utf-8")
        print(f"saved {len(outputs)} canonical results under {args.folder}")
        return 0
    import difflib

    changed = 0
    for name, text in sorted(outputs.items()):
        before_file = args.folder / f"{name}.json"
        before = before_file.read_text(encoding="utf-8") if before_file.is_file() else ""
        if before != text:
            changed += 1
            sys.stdout.writelines(
                difflib.unified_diff(
                    before.splitlines(True), text.splitlines(True), f"before/{name}", f"after/{name}", n=2
                )
            )
    print(f"{changed} of {len(outputs)} captures differ")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
