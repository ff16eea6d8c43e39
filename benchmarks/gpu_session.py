"""Runs a list of `hybrid` jobs on the GPU machine inside one device call and packs what they wrote.

The device lends a machine for a few minutes at a time and returns at most 8 files from $OUT, so this
driver: runs jobs in order with a per-job timeout, stops starting new ones when the time budget is
spent (so the call still ends well inside its limit and $OUT comes back), keeps going when a job
fails, trims nsys exports to the tables hybrid reads, and packs everything into one tar.gz.

Usage (on the device, after `source .devcarry/env.sh`):
  python benchmarks/gpu_session.py --budget-s 480 --pack $OUT/runs.tar.gz JOBFILE
JOBFILE lines: `NAME<TAB>COMMAND` (the command runs in the repo root with $RUN = the job's folder).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
from pathlib import Path

# nsys export tables hybrid never reads; dropping them keeps committed fixtures small.
_KEEP_PREFIXES = (
    "CUPTI_ACTIVITY_KIND_",
    "NVTX_EVENTS",
    "StringIds",
    "TARGET_INFO_GPU",
    "META_DATA_EXPORT",
    "OSRT_API",
    "PROFILER_OVERHEAD",
    "ENUM_",
    "TARGET_INFO_CUDA",
    "PROCESSES",
    "ThreadNames",
    # the declared layout of the Python samples' payloads (sql/python_sample_layout.sql)
    "NVTX_PAYLOAD_SCHEMA",
)


KEEP_TABLES = "KEEP_TABLES"


def trim_export(path: Path) -> None:
    con = sqlite3.connect(path)
    tables = [row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for table in tables:
        if not table.startswith(_KEEP_PREFIXES):
            con.execute(f'DROP TABLE "{table}"')  # names come from sqlite_master, not from input
    con.commit()
    con.execute("VACUUM")
    con.close()


def run_jobs(jobs: list[tuple[str, str]], root: Path, budget_s: float, job_timeout_s: float) -> list[dict]:
    started = time.monotonic()
    summary = []
    for name, command in jobs:
        elapsed = time.monotonic() - started
        if elapsed > budget_s:
            summary.append({"name": name, "status": "not run (time budget spent)"})
            continue
        run_dir = root / name
        run_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, RUN=str(run_dir), NO_COLOR="1")
        t0 = time.monotonic()
        # Within the budget, so the pack is written before the device call's own limit: a job allowed 60 s
        # past it (session 21) held a 600 s call to its end and nothing came back.
        timeout = max(30.0, min(job_timeout_s, budget_s - elapsed))
        # Its own process group, killed whole on timeout: killing bash alone left the workload it started
        # holding the output pipe, and the wait for that pipe outlasted the device call.
        proc = subprocess.Popen(
            ["bash", "-c", command],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
            status, rc = ("ok" if proc.returncode == 0 else "failed"), proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            status, rc = "timeout", None
        wall = round(time.monotonic() - t0, 2)
        (run_dir / "job.log").write_text(f"$ {command}\n{out}")
        summary.append({"name": name, "command": command, "status": status, "rc": rc, "wall_s": wall})
        print(f"{name:40s} {status:8s} rc={rc} {wall:7.1f}s", flush=True)
        if status != "ok":
            print("    " + "\n    ".join(out.strip().splitlines()[-6:]), flush=True)
    return summary


# The device returns at most 8 files of 16 MiB: archives are cut at this much input (traces and
# exports compress 5-15x).
ARCHIVE_INPUT_BYTES = 100 * 2**20
MAX_ARCHIVES = 7


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def pack(root: Path, target: Path) -> None:
    for export in root.rglob("*.sqlite"):
        # A job that needs every table (sampling, callchains) leaves KEEP_TABLES in its folder.
        if not any((parent / KEEP_TABLES).exists() for parent in export.parents if root in parent.parents):
            trim_export(export)
    # Reports are the collectors' own files (tens of MB each, cubins inside); hybrid reads the SQLite
    # export and the counters CSV made from them.
    for report in [*root.rglob("*.nsys-rep"), *root.rglob("*.ncu-rep")]:
        report.unlink()
    for trace in root.rglob("trace.json"):
        subprocess.run(["gzip", "-f", str(trace)], check=True)  # the trace loader reads .gz
    groups: list[list[Path]] = [[]]
    filled = 0
    for entry in sorted(root.iterdir()):
        size = _size(entry) if entry.is_dir() else entry.stat().st_size
        if groups[-1] and filled + size > ARCHIVE_INPUT_BYTES and len(groups) < MAX_ARCHIVES:
            groups.append([])
            filled = 0
        groups[-1].append(entry)
        filled += size
    for index, group in enumerate(groups):
        with tarfile.open(
            target.with_name(f"{target.name.removesuffix('.tar.gz')}-{index}.tar.gz"), "w:gz"
        ) as tar:
            for entry in group:
                tar.add(entry, arcname=f"{root.name}/{entry.name}", filter=_without_compile_cache)


def _without_compile_cache(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """A run's private Inductor cache is no input to any analysis, and a job killed at its limit leaves
    compile workers deleting in it while the pack reads it: one such file made the pack fail (session 24)."""
    return None if Path(member.name).name == "compile-cache" else member


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("jobfile")
    parser.add_argument(
        "--root",
        help="job folders (default /tmp/hybrid-gpu-runs/<pack name>: two sessions "
        "running side by side, one per GPU, must not pack each other's jobs)",
    )
    parser.add_argument("--budget-s", type=float, default=480)
    parser.add_argument("--job-timeout-s", type=float, default=240)
    parser.add_argument("--pack", required=True)
    args = parser.parse_args()
    jobs = []
    for line in Path(args.jobfile).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, command = line.split("\t", 1)
            jobs.append((name.strip(), command.strip()))
    root = Path(args.root or f"/tmp/hybrid-gpu-runs/{Path(args.pack).name.removesuffix('.tar.gz')}")
    root.mkdir(parents=True, exist_ok=True)
    summary = run_jobs(jobs, root, args.budget_s, args.job_timeout_s)
    (root / "summary.json").write_text(json.dumps(summary, indent=1))
    pack(root, Path(args.pack))
    packed = sum(p.stat().st_size for p in Path(args.pack).parent.glob("*.tar.gz"))
    print(
        f"packed {packed / 1e6:.1f} MB; "
        f"{sum(s['status'] == 'ok' for s in summary)}/{len(summary)} ok; argv: {shlex.join(sys.argv)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
