"""What recording callsites costs: the same pass (hybrid's own command line and injector) run once
per level, with the measured step time of each. Levels: the nsys pass at a callsite level (off,
python, cuda: nsight.nsys.CALLSITE_LEVELS), and the torch pass without (torch) and with Python
stacks (torch-stacks). Runs on a GPU machine with nsys:

    python benchmarks/callsite_cost.py RESULTS.json --work DIR [--levels off,python,cuda,torch,torch-stacks]
        [--warmup 3] [--steps 10] [--rounds 1] SCRIPT...

Levels run in the given order, alternating per round, so drift over the call lands on every level.
Each pass's export is deleted after its step time is read (only inject.json and the nsys log are kept).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nsight import nsys

TORCH_LEVELS = {"torch": [], "torch-stacks": ["--python-stacks"]}


def _pass(
    nsys_path: Path, help_text: str, script: str, level: str, out: Path, warmup: int, steps: int
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    pass_name = "torch" if level in TORCH_LEVELS else "nsys"
    inner = [
        sys.executable,
        "-m",
        "hybrid.inject.script",
        "--pass",
        pass_name,
        "--out",
        str(out),
        "--warmup",
        str(warmup),
        "--steps",
        str(steps),
        *TORCH_LEVELS.get(level, []),
        "--",
        script,
    ]
    flags: list[str] = list(TORCH_LEVELS.get(level, []))
    missing: list[str] = []
    argv = inner
    if pass_name == "nsys":
        sampling = nsys.callsite_sampling(help_text, level)
        flags, missing = list(sampling.flags), list(sampling.missing)
        argv = nsys.build_nsys_command(
            nsys_path, out / "profile", inner, capture_range=True, sampling=sampling
        )
    proc = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", check=False
    )
    (out / "pass.log").write_text(proc.stdout)
    for leftover in ("profile.sqlite", "profile.nsys-rep", "trace.json"):
        (out / leftover).unlink(missing_ok=True)
    inject = json.loads((out / "inject.json").read_text()) if (out / "inject.json").is_file() else {}
    return {
        "script": script,
        "level": level,
        "flags": flags,
        "missing": missing,
        "returncode": proc.returncode,
        "step_time_ms": inject.get("step_time_ms"),
        "unprofiled_step_time_ms": inject.get("unprofiled_step_time_ms"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--levels", default="off,python,cuda")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("scripts", nargs="+")
    args = parser.parse_args()
    levels = args.levels.split(",")
    nsys_path = nsys.find_nsys()
    if nsys_path is None and any(level not in TORCH_LEVELS for level in levels):
        print("nsys not found", file=sys.stderr)
        return 4
    help_text = nsys.profile_help(nsys_path) if nsys_path else ""
    rows = []
    for script in args.scripts:
        for round_index in range(args.rounds):
            order = levels if round_index % 2 == 0 else levels[::-1]
            for level in order:
                out = args.work / Path(script).stem / f"{level}-{round_index}"
                rows.append(
                    {
                        **_pass(nsys_path, help_text, script, level, out, args.warmup, args.steps),
                        "round": round_index,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    summary = []
    for script in args.scripts:
        times = {
            level: [
                r["step_time_ms"]
                for r in rows
                if r["script"] == script and r["level"] == level and r["step_time_ms"]
            ]
            for level in levels
        }
        for level in levels:
            # Each level against its own pass without callsites: the nsys pass at "off", the torch pass
            # without stacks.
            reference = "torch" if level in TORCH_LEVELS else "off"
            base = statistics.median(times[reference]) if times.get(reference) else None
            ms = statistics.median(times[level]) if times[level] else None
            summary.append(
                {
                    "script": script,
                    "level": level,
                    "step_time_ms": ms,
                    "against": reference,
                    "cost_pct": round(100 * (ms / base - 1), 1) if ms and base else None,
                }
            )
    args.results.write_text(
        json.dumps(
            {
                "nsys_version": nsys.nsys_version(nsys_path) if nsys_path else None,
                "passes": rows,
                "summary": summary,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
