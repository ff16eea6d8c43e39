"""Every query in sql/: a `-- requires:` header naming real export tables, named parameters only,
loaded through importlib.resources, and each runs on the real H200 export."""

from __future__ import annotations

import re
from contextlib import closing
from importlib.resources import files
from pathlib import Path

import pytest

from nsight.sqlite_export import load_query, open_export

FIXTURE = Path(__file__).parent / "fixtures" / "h200-probe" / "nsys_matmul_copy.sqlite"
# Queries over the Python samples run on a capture that has them (nsys --python-sampling).
SAMPLED = Path(__file__).parent / "fixtures" / "callsites" / "h200_data_pageable_h2d_sampled_no_blobs.sqlite"
EXPORT_FOR = {"python_samples": SAMPLED, "python_sample_layout": SAMPLED}
QUERIES = sorted(p.name[:-4] for p in files("nsight.sql").iterdir() if p.name.endswith(".sql"))
COLUMNAR = {"kernels", "runtime_calls", "memcpys", "memsets", "sync_targets"}
WHOLE = {"t0": 0, "t1": 2**62}
PARAMS = {
    **dict.fromkeys(("kernels", "runtime_calls", "memcpys", "memsets", "sync_targets", "nvtx_ranges"), WHOLE),
    "kernel_span": {"first_row": 1, "last_row": 10},
    "strings": {"ids": [708, 756]},
    "profiler_overhead": {"start_ns": 0, "end_ns": 2**62},
    "python_samples": {"start_ns": 0, "end_ns": 2**62},
}


def test_every_query_is_found():
    assert {
        "kernels",
        "runtime_calls",
        "memcpys",
        "memsets",
        "sync_events",
        "nvtx_ranges",
        "gpu_info",
        "profiler_overhead",
        "export_meta",
        "strings",
    } <= set(QUERIES)


@pytest.mark.parametrize("name", QUERIES)
def test_query_header_and_parameters(name):
    query = load_query(name)
    assert query.requires, f"{name}.sql lists no required tables"
    with closing(open_export(EXPORT_FOR.get(name, FIXTURE))) as export:
        assert not export.missing_tables(name), f"{name}.sql needs tables the real export lacks"
    body = "\n".join(line for line in query.sql.splitlines() if not line.lstrip().startswith("--"))
    assert "?" not in body and "{" not in body and "%s" not in body  # named parameters only
    assert set(re.findall(r":(\w+)", body)) == set(PARAMS.get(name, {}))


@pytest.mark.parametrize("name", QUERIES)
def test_query_runs_on_the_real_export(name):
    with closing(open_export(EXPORT_FOR.get(name, FIXTURE))) as export:
        if name in COLUMNAR:
            columns = export.columns(name, PARAMS.get(name))
            assert columns and len({len(v) for v in columns.values()}) == 1
            assert len(next(iter(columns.values()))) > 0
        else:
            frame = export.frame(name, PARAMS.get(name))
            assert frame is not None and len(frame) > 0


def test_strings_resolves_a_json_list_of_ids():
    with closing(open_export(FIXTURE)) as export:
        assert export.strings([708, 756, 708]) == {708: "step0", 756: "step1"}


def test_a_window_reads_the_rows_that_start_in_it():
    with closing(open_export(FIXTURE)) as export:
        everything = export.columns("kernels")  # no window given: the whole capture
        starts = sorted(everything["start_ns"].tolist())
        t0, t1 = starts[5], starts[14]
        window = export.columns("kernels", {"t0": t0, "t1": t1})
        assert sorted(window["start_ns"].tolist()) == starts[5:15]
        extent = export.frame("kernel_extent").iloc[0]
        assert extent["last_row"] - extent["first_row"] + 1 == len(starts)
        rows = {"first_row": int(extent["first_row"]), "last_row": int(extent["last_row"])}
        span = export.frame("kernel_span", rows)
        assert (span["first_start_ns"].iloc[0], span["last_start_ns"].iloc[0]) == (starts[0], starts[-1])


def test_columnar_queries_match_row_counts():
    with closing(open_export(FIXTURE)) as export:
        counts = {"kernels": 22, "memcpys": 10, "memsets": 10}
        for name, expected in counts.items():
            assert len(export.columns(name)["start_ns"]) == expected
        calls = export.columns("runtime_calls")
        names = export.strings(calls["name_id"])
        # launches (17 runtime + 5 driver), 10 async copies, 10 memsets, 11 syncs
        assert len(calls["start_ns"]) == 22 + 10 + 10 + 11
        assert {n.split("_v")[0] for n in names.values()} == {
            "cudaLaunchKernel",
            "cuLaunchKernelEx",
            "cudaMemcpyAsync",
            "cudaMemsetAsync",
            "cudaStreamSynchronize",
            "cudaDeviceSynchronize",
        }
