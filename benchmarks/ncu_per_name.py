"""Would one ncu replay per kernel name do instead of one per launch configuration? (issue 21, on the GPU)

The ncu pass profiles one launch per (kernel, launch configuration) in the measured step: 68 launches at
15 replay passes on resnet50 b64, 39.6 s of a 74.8 s diagnosis whose goal is 50.1 s (session 7,
benchmarks/results/cost.md). Profiling each selected kernel name once (`--kernel-id ::regex:NAMES:1`,
Nsight Compute's "N-th invocation of every kernel matching") would replay 12. This re-runs a finished
run's own ncu command (RUN/ncu/command.txt) with that filter instead, and prints one JSON object: both
passes' wall time and profiled launches, and per kernel name how far the per-name launch's ratio counters
(hit rates, sectors per request, achieved occupancy, pipe and throughput percentages) are from the mean of
the per-configuration launches the run measured, weighted by their duration.

Usage (on the GPU machine, after a `hybrid diagnose/run --mode hybrid` run):
  python3 benchmarks/ncu_per_name.py RUN_DIR
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

# Counters that are ratios of the kernel's own work: comparable across launch configurations of one kernel.
RATIO_COUNTERS = (
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_sector_hit_rate.pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active",
)
SECTORS, REQUESTS = (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
)
DURATION = "gpu__time_duration.sum"


def _per_name_argv(argv: list[str], report: Path) -> list[str]:
    """The run's ncu argv with one launch per kernel name and its own report."""
    out, i = [], 0
    pattern = None
    while i < len(argv):
        arg = argv[i]
        if arg == "--kernel-name":
            pattern = argv[i + 1].removeprefix("regex:")
            i += 2
            continue
        if arg in ("--filter-mode", "--launch-count"):
            i += 2
            continue
        if arg == "--export":
            out += [arg, str(report)]
            i += 2
            continue
        out.append(arg)
        i += 1
    if pattern is None:
        raise SystemExit("the run's ncu command has no --kernel-name filter")
    # The injector writes its inject.json beside the new report, not over the run's ncu pass.
    injector = out.index("hybrid.inject.script")
    where = out.index("--out", injector)
    out[where + 1] = str(report.parent)
    cut = out.index("--profile-from-start")
    # --kernel-id splits on ':', so the filter's non-capturing group "(?:" would cut the regex short.
    pattern = pattern.replace("(?:", "(")
    return out[:cut] + ["--kernel-id", f"::regex:{pattern}:1"] + out[cut:]


def _rows(ncu: str, report: Path) -> list[dict]:
    text = subprocess.run(
        [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    return [r for r in rows if r.get("ID", "").isdigit()]


def _number(value: str | None) -> float | None:
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        return None


def _base(name: str) -> str:
    head = name.split("(")[0]
    return re.sub(r"<.*", "", head).split()[-1].split("::")[-1]


def _ratios(row: dict) -> dict[str, float]:
    out = {k: v for k in RATIO_COUNTERS if (v := _number(row.get(k))) is not None}
    sectors, requests = _number(row.get(SECTORS)), _number(row.get(REQUESTS))
    if sectors is not None and requests:
        out["sectors_per_request"] = sectors / requests
    return out


def main() -> int:
    run = Path(sys.argv[1]).resolve()
    argv = shlex.split((run / "ncu" / "command.txt").read_text())
    ncu = argv[0]
    report = run / "ncu_per_name" / "report.ncu-rep"
    report.parent.mkdir(exist_ok=True)
    started = time.monotonic()
    done = subprocess.run(
        _per_name_argv(argv, report), check=False, capture_output=True, text=True, timeout=600
    )
    wall_s = time.monotonic() - started
    (report.parent / "ncu.log").write_text(done.stdout[-20000:] + done.stderr[-20000:])
    original = next(p for p in json.loads((run / "run.json").read_text())["passes"] if p["name"] == "ncu")
    before = _rows(ncu, run / "ncu" / "report.ncu-rep")
    after = _rows(ncu, report) if report.exists() else []
    by_name: dict[str, dict] = {}
    for row in after:
        name = _base(row["Kernel Name"])
        configs = [r for r in before if _base(r["Kernel Name"]) == name]
        weights = [_number(r.get(DURATION)) or 0.0 for r in configs]
        mean = {}
        for key in _ratios(row):
            values = [(_ratios(r).get(key), w) for r, w in zip(configs, weights, strict=True)]
            values = [(v, w) for v, w in values if v is not None]
            if values and sum(w for _v, w in values):
                mean[key] = sum(v * w for v, w in values) / sum(w for _v, w in values)
        by_name[name] = {
            "configs_measured": len(configs),
            "per_name": _ratios(row),
            "per_config_weighted": mean,
        }
    json.dump(
        {
            "run": str(run),
            "per_config": {"wall_s": original.get("wall_s"), "launches": len(before)},
            "per_name": {"wall_s": round(wall_s, 1), "launches": len(after), "returncode": done.returncode},
            "kernels": by_name,
        },
        sys.stdout,
        indent=1,
    )
    print()
    return 0 if after else 1


if __name__ == "__main__":
    sys.exit(main())
