"""Scale a real H200 export up to N kernels for the report-scale benchmark.

    python benchmarks/make_large_export.py 1000000 /tmp/nsys_1m.sqlite [--kernels-per-step 1000]
    python benchmarks/make_large_export.py 1000000 /tmp/bare_1m.sqlite --template launch --bare

The steady-state window of a template export (its hybrid `step N` ranges from step 1 on) is
replicated with shifted times and fresh correlation ids until the export holds about N kernels; the
replicas follow each other with the template's own median gap between steps. Templates:
- `probe` (default): tests/fixtures/h200-probe/nsys_matmul_copy.sqlite, steps 1..4: GEMM,
  elementwise and reduce kernels, pageable 32 MiB copies, memsets, stream syncs, and every
  runtime/driver call around them;
- `launch`: the planted launch_batch1_deep_mlp capture, steps 1..4: a launch-bound loop whose
  iteration serves 64 batch-1 requests through 32 x (Linear + GELU), 4,097 kernels, one launch call
  each (the loop the user wrote holds 64 identical inner forwards of 32 identical layers).
The copies are then wrapped in NVTX ranges `step N` of domain `hybrid`, as the injector writes them,
`--kernels-per-step` kernels each; with `--bare` every NVTX range is removed instead, as in a plain
`nsys profile python script.py` capture, so hybrid has to find the steps itself. The schema is the
fixture's own, so the loader meets exactly what nsys writes, only more of it.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
import sqlite3
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
TEMPLATES = {
    "probe": FIXTURES / "h200-probe" / "nsys_matmul_copy.sqlite",
    "launch": FIXTURES / "planted" / "launch_batch1_deep_mlp" / "run" / "nsys" / "profile.sqlite",
}

# Calls of a template that hybrid's injector made, not the user's loop: replicated, they would mark
# the replica as a unit of its own (the launch capture ends its measured steps with one device sync).
INJECTOR_CALLS = {"launch": "cudaDeviceSynchronize%"}
# A template's steps from 1 on are steady state (step 0 loads modules and allocates).
FIRST_STEADY_STEP = 1
STEP_TEXT = re.compile(r"^step ?(\d+)$")
# Activity tables copied per replica; their rows belong to the window by their launch call.
DEVICE_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
)
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
HYBRID_DOMAIN_ID = 1
NVTX_PUSH_POP, NVTX_DOMAIN_CREATE = 59, 75


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def _shifted_select(columns: list[str]) -> str:
    """SELECT list that shifts times by c.shift and correlation ids by c.corr (the replica)."""
    moved = {
        "start": "t.start + c.shift",
        "end": "t.end + c.shift",
        "correlationId": "t.correlationId + c.corr",
    }
    return ", ".join(moved.get(col, f"t.{col}") for col in columns)


def _template_steps(db: sqlite3.Connection) -> list[tuple[int, int]]:
    """(start, end) of the template's steady step ranges, in step order."""
    rows = db.execute(
        "SELECT coalesce(n.text, s.value), n.start, n.end FROM NVTX_EVENTS n "
        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.end IS NOT NULL"
    ).fetchall()
    steps = sorted(
        (int(m.group(1)), start, end) for text, start, end in rows if text and (m := STEP_TEXT.match(text))
    )
    return [(start, end) for number, start, end in steps if number >= FIRST_STEADY_STEP]


def make_large_export(
    kernels: int, out: Path, kernels_per_step: int, template: str = "probe", bare: bool = False
) -> dict:
    shutil.copyfile(TEMPLATES[template], out)
    db = sqlite3.connect(out)
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    steps_in_template = _template_steps(db)
    window_start, window_end = steps_in_template[0][0], steps_in_template[-1][1]
    between = sorted(b[0] - a[1] for a, b in itertools.pairwise(steps_in_template))
    (main_tid,) = db.execute(
        "SELECT globalTid FROM NVTX_EVENTS WHERE globalTid IS NOT NULL LIMIT 1"
    ).fetchone()
    # Replicas follow each other as the template's steps do (probe: 50 us, as between real steps).
    period = window_end - window_start + (between[len(between) // 2] if between else 50_000)
    corr_span = db.execute(f"SELECT max(correlationId) + 1 FROM {RUNTIME}").fetchone()[0]
    base_kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]

    # Template rows: runtime calls in the window, device rows launched by them.
    db.execute(
        f"CREATE TEMP TABLE tmpl_runtime AS SELECT * FROM {RUNTIME} WHERE start BETWEEN ? AND ? "
        "AND nameId NOT IN (SELECT id FROM StringIds WHERE value LIKE ?)",
        (window_start, window_end, INJECTOR_CALLS.get(template, "")),
    )
    per_replica = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId IN "
        "(SELECT correlationId FROM tmpl_runtime)"
    ).fetchone()[0]
    replicas = max(1, round((kernels - base_kernels) / per_replica))
    # Replica 0 is the original window; 1..replicas-1 are inserted after the fixture's end.
    last_end = db.execute(f"SELECT max(end) FROM {RUNTIME}").fetchone()[0]
    first_shift = (last_end - window_start) + period
    db.execute("CREATE TEMP TABLE replicas (n INTEGER, shift INTEGER, corr INTEGER)")
    db.executemany(
        "INSERT INTO replicas VALUES (?, ?, ?)",
        [(n, 0 if n == 0 else first_shift + (n - 1) * period, n * corr_span) for n in range(replicas)],
    )

    cols = _columns(db, RUNTIME)
    db.execute(
        f"INSERT INTO {RUNTIME} ({', '.join(cols)}) SELECT {_shifted_select(cols)} "
        "FROM tmpl_runtime AS t, replicas AS c WHERE c.n > 0"
    )
    for table in (t for t in DEVICE_TABLES if t in tables):
        cols = _columns(db, table)
        db.execute(
            f"CREATE TEMP TABLE tmpl AS SELECT * FROM {table} "
            "WHERE correlationId IN (SELECT correlationId FROM tmpl_runtime)"
        )
        db.execute(
            f"INSERT INTO {table} ({', '.join(cols)}) SELECT {_shifted_select(cols)} "
            "FROM tmpl AS t, replicas AS c WHERE c.n > 0"
        )
        db.execute("DROP TABLE tmpl")

    # Steps: hybrid's own markers over groups of replicas, replacing the fixture's step0..4.
    db.execute("DELETE FROM NVTX_EVENTS")
    if bare:
        return _finish(db, {"steps": 0, "replicas": replicas, "kernels_per_replica": per_replica})
    db.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
        "VALUES (?, NULL, ?, 'hybrid', ?, ?)",
        (window_start - 1_000, NVTX_DOMAIN_CREATE, main_tid, HYBRID_DOMAIN_ID),
    )
    group = max(1, kernels_per_step // per_replica)
    shifts = [row[0] for row in db.execute("SELECT shift FROM replicas ORDER BY n")]
    steps = []
    for step, first in enumerate(range(0, replicas, group)):
        last = min(first + group, replicas) - 1
        steps.append(
            (
                window_start + shifts[first] - 10_000,
                window_end + shifts[last] + 10_000,
                NVTX_PUSH_POP,
                f"step {step}",
                main_tid,
                HYBRID_DOMAIN_ID,
            )
        )
    db.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        steps,
    )
    return _finish(db, {"steps": len(steps), "replicas": replicas, "kernels_per_replica": per_replica})


def _finish(db: sqlite3.Connection, facts: dict) -> dict:
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'ANALYSIS_DETAILS'").fetchone():
        # The session now lasts until the last replica's work ends (hybrid drops records outside it).
        last = max(
            db.execute(f"SELECT max(end) FROM {table}").fetchone()[0] or 0
            for table in (RUNTIME, *DEVICE_TABLES)
            if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        )
        db.execute(
            "UPDATE ANALYSIS_DETAILS SET stopTime = max(stopTime, ?), "
            "duration = max(stopTime, ?) - startTime",
            (last, last),
        )
    db.commit()
    total = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    db.execute("VACUUM")
    db.close()
    return {"kernels": total, **facts}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kernels", type=int, help="about how many kernels the export should hold")
    parser.add_argument("out", type=Path, help="the .sqlite file to write (overwritten)")
    parser.add_argument("--kernels-per-step", type=int, default=1000)
    parser.add_argument("--template", choices=sorted(TEMPLATES), default="probe")
    parser.add_argument("--bare", action="store_true", help="no NVTX ranges at all (a plain nsys capture)")
    args = parser.parse_args()
    print(make_large_export(args.kernels, args.out, args.kernels_per_step, args.template, args.bare))


if __name__ == "__main__":
    main()
