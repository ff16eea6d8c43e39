"""Make a small test fixture from a bare nsys export (tests/fixtures/bare/): keep what hybrid reads.

    python benchmarks/trim_bare_export.py SRC.sqlite DST.sqlite [--keep-s SECONDS]

- CUDA runtime/driver calls other than launches, copies, memsets and synchronizations are dropped
  (sql/runtime_calls.sql reads only those; cuda_processes.sql needs one call per process, kept);
- OS runtime calls shorter than the blocking threshold of the report are dropped (sql/osrt_blocking.sql
  filters them out anyway);
- with --keep-s, activity later than SECONDS after the first kernel is dropped (a long capture cut
  to its start-up and first iterations).
The result is VACUUMed. Table and column names are fixed here, never taken from input.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from pathlib import Path

from hybrid.load.nsys_export import OSRT_BLOCKING_MIN_NS

WANTED_API = (
    "cudaLaunch%",
    "cuLaunch%",
    "cudaGraphLaunch%",
    "cuGraphLaunch%",
    "cudaMemcpy%",
    "cuMemcpy%",
    "cudaMemset%",
    "cuMemset%",
    "%Synchronize%",
)
TIMED_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "OSRT_API",
)


def trim(source: Path, target: Path, keep_s: float | None) -> None:
    shutil.copyfile(source, target)
    db = sqlite3.connect(target)
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    wanted = " OR ".join("value LIKE ?" for _ in WANTED_API)
    db.execute(
        f"""DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId NOT IN
                   (SELECT id FROM StringIds WHERE {wanted})
                   AND rowid NOT IN (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME
                                     GROUP BY globalTid & 0xFFFFFFFFFF000000)""",
        WANTED_API,
    )
    if "OSRT_API" in tables:
        db.execute("DELETE FROM OSRT_API WHERE end - start < ?", (OSRT_BLOCKING_MIN_NS,))
    if keep_s is not None:
        ((first,),) = db.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
        cut = int(first + keep_s * 1e9)
        for table in TIMED_TABLES:
            if table in tables:
                db.execute(
                    f"DELETE FROM {table} WHERE start > ?", (cut,)
                )  # table names are the constants above
    db.commit()
    db.execute("VACUUM")
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--keep-s", type=float, default=None)
    args = parser.parse_args()
    trim(args.source, args.target, args.keep_s)


if __name__ == "__main__":
    main()
