"""Scale the real H200 export up to N kernels for the report-scale benchmark.

    python benchmarks/make_large_export.py 1000000 /tmp/nsys_1m.sqlite [--kernels-per-step 1000]

The steady-state window of tests/fixtures/h200-probe/nsys_matmul_copy.sqlite (its steps 1..4:
GEMM, elementwise and reduce kernels, pageable 32 MiB copies, memsets, stream syncs, and every
runtime/driver call around them) is replicated with shifted times and fresh correlation ids until
the export holds about N kernels. The copies are then wrapped in NVTX ranges `step N` of domain
`hybrid`, as the injector writes them, `--kernels-per-step` kernels each. The schema is the
fixture's own, so the loader meets exactly what nsys writes, only more of it.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "h200-probe" / "nsys_matmul_copy.sqlite"

# The fixture's steps 1..4 are steady state (step 0 loads modules and allocates).
TEMPLATE_FIRST, TEMPLATE_LAST = "step1", "step4"
# Activity tables copied per replica; their rows belong to the window by their launch call.
DEVICE_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                 "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
HYBRID_DOMAIN_ID = 1
NVTX_PUSH_POP, NVTX_DOMAIN_CREATE = 59, 75


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def _shifted_select(columns: list[str]) -> str:
    """SELECT list that shifts times by c.shift and correlation ids by c.corr (the replica)."""
    moved = {"start": "t.start + c.shift", "end": "t.end + c.shift",
             "correlationId": "t.correlationId + c.corr"}
    return ", ".join(moved.get(col, f"t.{col}") for col in columns)


def make_large_export(kernels: int, out: Path, kernels_per_step: int) -> dict:
    shutil.copyfile(FIXTURE, out)
    db = sqlite3.connect(out)
    range_edge = "SELECT {} FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE s.value = ?"
    window_start = db.execute(range_edge.format("start"), (TEMPLATE_FIRST,)).fetchone()[0]
    window_end = db.execute(range_edge.format("end"), (TEMPLATE_LAST,)).fetchone()[0]
    main_tid, = db.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()
    period = window_end - window_start + 50_000  # 50 us between replicas, as between real steps
    corr_span = db.execute(f"SELECT max(correlationId) + 1 FROM {RUNTIME}").fetchone()[0]
    base_kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]

    # Template rows: runtime calls in the window, device rows launched by them.
    db.execute(f"CREATE TEMP TABLE tmpl_runtime AS SELECT * FROM {RUNTIME} WHERE start BETWEEN ? AND ?",
               (window_start, window_end))
    per_replica = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId IN "
        "(SELECT correlationId FROM tmpl_runtime)").fetchone()[0]
    replicas = max(1, round((kernels - base_kernels) / per_replica))
    # Replica 0 is the original window; 1..replicas-1 are inserted after the fixture's end.
    last_end = db.execute(f"SELECT max(end) FROM {RUNTIME}").fetchone()[0]
    first_shift = (last_end - window_start) + period
    db.execute("CREATE TEMP TABLE replicas (n INTEGER, shift INTEGER, corr INTEGER)")
    db.executemany("INSERT INTO replicas VALUES (?, ?, ?)",
                   [(n, 0 if n == 0 else first_shift + (n - 1) * period, n * corr_span) for n in range(replicas)])

    cols = _columns(db, RUNTIME)
    db.execute(f"INSERT INTO {RUNTIME} ({', '.join(cols)}) SELECT {_shifted_select(cols)} "
               "FROM tmpl_runtime AS t, replicas AS c WHERE c.n > 0")
    for table in DEVICE_TABLES:
        cols = _columns(db, table)
        db.execute(f"CREATE TEMP TABLE tmpl AS SELECT * FROM {table} "
                   "WHERE correlationId IN (SELECT correlationId FROM tmpl_runtime)")
        db.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {_shifted_select(cols)} "
                   "FROM tmpl AS t, replicas AS c WHERE c.n > 0")
        db.execute("DROP TABLE tmpl")

    # Steps: hybrid's own markers over groups of replicas, replacing the fixture's step0..4.
    db.execute("DELETE FROM NVTX_EVENTS")
    db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
               "VALUES (?, NULL, ?, 'hybrid', ?, ?)", (window_start - 1_000, NVTX_DOMAIN_CREATE, main_tid,
                                                       HYBRID_DOMAIN_ID))
    group = max(1, kernels_per_step // per_replica)
    shifts = [row[0] for row in db.execute("SELECT shift FROM replicas ORDER BY n")]
    steps = []
    for step, first in enumerate(range(0, replicas, group)):
        last = min(first + group, replicas) - 1
        steps.append((window_start + shifts[first] - 10_000, window_end + shifts[last] + 10_000,
                      NVTX_PUSH_POP, f"step {step}", main_tid, HYBRID_DOMAIN_ID))
    db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                   "VALUES (?, ?, ?, ?, ?, ?)", steps)
    db.commit()
    total = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    db.execute("VACUUM")
    db.close()
    return {"kernels": total, "steps": len(steps), "replicas": replicas, "kernels_per_replica": per_replica}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernels", type=int, help="about how many kernels the export should hold")
    parser.add_argument("out", type=Path, help="the .sqlite file to write (overwritten)")
    parser.add_argument("--kernels-per-step", type=int, default=1000)
    args = parser.parse_args()
    print(make_large_export(args.kernels, args.out, args.kernels_per_step))


if __name__ == "__main__":
    main()
