"""Time `load_nsys_export` and `python -m hybrid report` on scaled-up nsys exports.

    python benchmarks/bench_report_scale.py [--sizes 100000 1000000] [--repeat 3] [--workdir DIR]

Each measurement is a fresh Python process (so the time includes interpreter start and imports,
as a user sees it); wall time is measured around the process, CPU time and peak RSS come from
os.wait4's rusage of that very process. Exports are made by make_large_export.py and reused.
Prints a markdown table; the load average is printed too, since a busy box stretches wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from make_large_export import make_large_export

LOAD_ONLY = "import sys; from hybrid.nsys_pass import load_nsys_export; load_nsys_export(sys.argv[1])"


def measure(argv: list[str]) -> dict:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one child process run to completion."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):  # 1: a finding at --fail-on, still a finished report
        raise RuntimeError(f"{argv} exited {child.returncode}: {child.stderr.read().decode()[-2000:]}")
    child.stderr.close()
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/hybrid-report-scale"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)

    print(f"cpus: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.2f}\n")
    print("| kernels in export | what | wall s (median) | wall s (max) | CPU s | peak RSS MiB |")
    print("|---:|---|---:|---:|---:|---:|")
    for size in args.sizes:
        export = args.workdir / f"nsys_{size}.sqlite"
        if not export.exists():
            make_large_export(size, export, kernels_per_step=1000)
        for what, argv in (("load_nsys_export", [sys.executable, "-c", LOAD_ONLY, str(export)]),
                           ("hybrid report", [sys.executable, "-m", "hybrid", "report", str(export)])):
            runs = [measure(argv) for _ in range(args.repeat)]
            walls = [r["wall_s"] for r in runs]
            print(f"| {size:,} | `{what}` | {statistics.median(walls):.2f} | {max(walls):.2f} | "
                  f"{statistics.median(r['cpu_s'] for r in runs):.2f} | {max(r['rss_mib'] for r in runs):.0f} |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
