"""Profile.api_calls and the copies' and memsets' correlation ids, on real H200 exports, checked
against SQL written here (independent of sql/ and of the loader)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hybrid.load.nsys_export import load_nsys_export

FIXTURES = Path(__file__).parent / "fixtures"
RESNET = FIXTURES / "runs" / "h200-resnet50" / "nsys" / "profile.sqlite"
ITEM_SYNC = FIXTURES / "planted" / "sync_item_per_microstep" / "run" / "nsys" / "profile.sqlite"

CALLS_BY_NAME_SQL = """
SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
WHERE s.value LIKE 'cudaStreamWaitEvent%' OR s.value LIKE 'cudaEventRecord%'
   OR s.value LIKE 'cudaStreamSynchronize%' OR s.value LIKE 'cudaLaunchKernel%'
GROUP BY 1
"""
SYNC_STREAM_SQL = """
SELECT r.start, y.streamId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION y
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
  ON r.correlationId = y.correlationId AND (r.globalTid & 0xFFFFFFFFFF000000) = y.globalPid
"""


def _sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(query).fetchall()


def test_api_calls_hold_event_records_stream_waits_and_their_streams():
    profile = load_nsys_export(RESNET)
    calls = profile.api_calls
    counts = calls["api"].astype(str).value_counts()
    for name, expected in _sql(RESNET, CALLS_BY_NAME_SQL):
        assert counts[name] == expected
    assert (calls["start_ns"].diff().dropna() >= 0).all()
    by_start = dict(zip(calls["start_ns"], calls["sync_stream"], strict=False))
    pairs = _sql(RESNET, SYNC_STREAM_SQL)
    assert len(pairs) == 600 and all(by_start[start] == stream for start, stream in pairs)
    assert set(calls.loc[calls["sync_stream"] >= 0, "api"].astype(str).str.split("_v").str[0]) == {
        "cudaStreamWaitEvent"
    }
    # Two threads launch work: the main thread and autograd's device thread.
    assert calls["global_tid"].nunique() == 2


def test_copies_and_memsets_carry_the_correlation_of_their_call():
    profile = load_nsys_export(ITEM_SYNC)
    calls = profile.api_calls.set_index("correlation")["api"].astype(str)
    copy_calls = calls.reindex(profile.memcpys["correlation"]).str.split("_v").str[0]
    memset_calls = calls.reindex(profile.memsets["correlation"]).str.split("_v").str[0]
    assert len(profile.memcpys) == 40 and set(copy_calls) == {"cudaMemcpyAsync"}
    assert len(profile.memsets) == 300 and set(memset_calls) == {"cudaMemsetAsync"}
    syncs = profile.api_calls[profile.api_calls["api"].astype(str).str.startswith("cudaStreamSynchronize")]
    assert len(syncs) == 20 and set(syncs["sync_stream"]) == {7}
