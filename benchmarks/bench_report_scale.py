"""Time `load_nsys_export` and `python -m hybrid report` on scaled-up nsys exports.

    python benchmarks/bench_report_scale.py [--sizes 1000000 10000000 50000000] [--repeat 3]
        [--template launch|probe] [--marked] [--workdir DIR]

Exports are made by make_large_export.py (by default the planted launch-bound loop, bare: no NVTX
at all, so hybrid finds the steps itself) and reused. Each measurement is a fresh Python process (so
the time includes interpreter start and imports, as a user sees it); wall time is measured around the
process, CPU time and peak RSS come from os.wait4's rusage of that very process. Prints a markdown
table with the median and the worst of the repeats, and what the report found as the step; the load
average is printed too, since a busy box stretches wall time (CPU time is the steadier figure).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from make_large_export import make_large_export

LOAD_ONLY = "import sys; from hybrid.load.nsys_export import load_nsys_export; load_nsys_export(sys.argv[1])"


def measure(argv: list[str], stdout) -> dict:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one child process run to completion."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):  # 1: a finding at --fail-on, still a finished report
        raise RuntimeError(f"{argv} exited {child.returncode}: {child.stderr.read().decode()[-2000:]}")
    child.stderr.close()
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def _found(results_json: Path) -> str:
    results = json.loads(results_json.read_text())
    workload = results.get("workload") or {}
    return (
        f"{workload.get('steps_measured')} steps of {results['timing']['step_time_ms']:.3g} ms; "
        f"{workload.get('step_unit')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--template", choices=("launch", "probe"), default="launch")
    parser.add_argument("--marked", action="store_true", help="hybrid's NVTX step ranges (default: bare)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/hybrid-report-scale"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    kind = f"{args.template}_{'marked' if args.marked else 'bare'}"

    print(f"cpus: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.2f}; exports: {kind}\n")
    print(
        "| kernels in export | what | wall s (median) | wall s (worst) | CPU s (worst) "
        "| peak RSS MiB (worst) | step found |"
    )
    print("|---:|---|---:|---:|---:|---:|---|")
    for size in args.sizes:
        export = args.workdir / f"{kind}_{size}.sqlite"
        if not export.exists():
            make_large_export(size, export, 1000, template=args.template, bare=not args.marked)
        for what in ("load_nsys_export", "hybrid report"):
            runs, found = [], ""
            for _ in range(args.repeat):
                if what == "load_nsys_export":
                    runs.append(measure([sys.executable, "-c", LOAD_ONLY, str(export)], subprocess.DEVNULL))
                    continue
                with (
                    tempfile.NamedTemporaryFile("w+", suffix=".json") as out,
                    tempfile.TemporaryDirectory() as folder,
                ):
                    report = [
                        sys.executable,
                        "-m",
                        "hybrid",
                        "report",
                        str(export),
                        "--json",
                        "--out",
                        folder,
                    ]
                    runs.append(measure(report, out))
                    found = _found(Path(out.name))
            walls = [r["wall_s"] for r in runs]
            print(
                f"| {size:,} | `{what}` | {statistics.median(walls):.2f} | {max(walls):.2f} | "
                f"{max(r['cpu_s'] for r in runs):.2f} | {max(r['rss_mib'] for r in runs):.0f} | {found} |",
                flush=True,
            )
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
