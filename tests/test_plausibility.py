"""Records and counters no device can produce are dropped and named, never used or shown as measured
(hybrid.load.plausible): real H200 captures with one value made impossible, chosen by hypothesis, in the style
of test_fuzz_readers. Every committed capture's own values pass untouched."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid.analysis.metrics import compute_metrics
from hybrid.hardware import peaks_for
from hybrid.load.ncu_match import attach_counters
from hybrid.load.nsys_export import load_nsys_export
from hybrid.load.plausible import TOLERANCE, drop_implausible_counters
from hybrid.pipeline import analyze_export
from nsight.ncu_csv import read_ncu_csv

FIXTURES = Path(__file__).parent / "fixtures"
PROBE = FIXTURES / "h200-probe" / "nsys_matmul_copy.sqlite"
RUN = FIXTURES / "planted" / "tc_fp16_unaligned" / "run"
INT64_MAX = 2**63 - 1
FUZZ = settings(
    max_examples=8,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def run_profile():
    return load_nsys_export(RUN / "nsys" / "profile.sqlite")


@pytest.fixture(scope="module")
def run_counters():
    return read_ncu_csv(RUN / "ncu" / "counters.csv")


def test_committed_captures_are_plausible():
    exports = [PROBE, *sorted(FIXTURES.glob("bare/*.sqlite")), *sorted(FIXTURES.glob("runs/*/nsys/*.sqlite"))]
    for export in exports:
        warnings = load_nsys_export(export).warnings
        assert not any("impossible times or sizes" in w for w in warnings), export
    h200 = peaks_for(load_nsys_export(PROBE).device)  # every committed capture ran on the H200
    for csv in sorted(FIXTURES.glob("**/counters.csv")):
        _, dropped = drop_implausible_counters(read_ncu_csv(csv).frame, h200)
        assert dropped == [], csv


CORRUPT_TIMES = st.sampled_from(["end_int64_max", "end_before_start", "far_future", "negative_bytes"])


@pytest.fixture(scope="module")
def probe_util_pct():
    return analyze_export(PROBE)["timing"]["gpu_util_pct"]


@FUZZ
@given(kind=CORRUPT_TIMES, rows=st.sets(st.integers(1, 22), min_size=1, max_size=3))
def test_corrupt_device_records_are_dropped_and_named(tmp_path, probe_util_pct, kind, rows):
    export = tmp_path / "corrupt.sqlite"
    shutil.copyfile(PROBE, export)
    table = "CUPTI_ACTIVITY_KIND_MEMCPY" if kind == "negative_bytes" else "CUPTI_ACTIVITY_KIND_KERNEL"
    change = {
        "end_int64_max": f"end = {INT64_MAX}",
        "end_before_start": "end = start - 1000",
        "far_future": "start = start + 10000000000000000, end = end + 10000000000000000",
        "negative_bytes": "bytes = -bytes",
    }[kind]
    with sqlite3.connect(export) as db:
        limit = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        corrupted = sorted(r for r in rows if r <= limit)
        db.execute(f"UPDATE {table} SET {change} WHERE rowid IN ({','.join(map(str, corrupted))})")
    profile = load_nsys_export(export)
    frame = profile.memcpys if kind == "negative_bytes" else profile.kernels
    assert len(frame) == limit - len(corrupted)
    warning = next(w for w in profile.warnings if "impossible times or sizes dropped" in w)
    assert warning.startswith(f"{len(corrupted)} ")
    assert (frame["end_ns"] >= frame["start_ns"]).all() and (frame["end_ns"] < 10**16).all()
    # The analysis reads only measured work (one kernel at INT64_MAX once made every step 100% busy): at
    # most the probe's own utilization, less what the dropped records ran.
    results = analyze_export(export)
    assert results["timing"]["gpu_util_pct"] <= probe_util_pct + 1e-6


@FUZZ
@given(step=st.integers(1, 4))
def test_an_nvtx_step_range_that_ends_before_it_starts_is_dropped_and_named(tmp_path, step):
    export = tmp_path / "backwards.sqlite"
    shutil.copyfile(PROBE, export)
    with sqlite3.connect(export) as db:
        db.execute(
            "UPDATE NVTX_EVENTS SET end = start - 1 WHERE textId = "
            "(SELECT id FROM StringIds WHERE value = ?)",
            (f"step{step}",),
        )
    profile = load_nsys_export(export, step_range="step")
    assert f"step{step}" not in set(profile.steps["name"])
    assert (profile.steps["end_ns"] >= profile.steps["start_ns"]).all() and len(profile.steps) == 4
    assert any(w.startswith("1 NVTX range(s) that end before they start dropped") for w in profile.warnings)


def _corrupted(counters, row: int, column: str, value) -> object:
    frame = counters.frame.copy()
    frame.loc[row, column] = value
    counters = type(counters)(**{**counters.__dict__, "frame": frame})
    return counters


@FUZZ
@given(
    row=st.integers(0, 15),
    case=st.sampled_from(
        [
            ("dram_read_bytes", "rate", 257.0),
            ("dram_write_bytes", "value", float("inf")),
            ("dram_read_bytes", "value", -4096.0),
            ("tensor_pipe_pct", "value", 250.0),
            ("l2_bytes", "value", float("-inf")),
            ("duration_ns", "value", 0.0),
            ("tensor_flops", "rate", 1e4),
        ]
    ),
)
def test_implausible_counters_are_dropped_and_named(run_profile, run_counters, row, case):
    column, how, amount = case
    peaks = peaks_for(run_profile.device)
    if how == "rate":  # `amount` times the device's peak over the kernel's duration
        seconds = run_counters.frame.loc[row, "duration_ns"] / 1e9
        fastest = max(v for v in map(peaks.flops, peaks.flops_per_s) if v)
        peak = peaks.dram if column.startswith("dram") else fastest
        value = amount * peak * seconds
    else:
        value = amount
    attached = attach_counters(run_profile, _corrupted(run_counters, row, column, value))
    warning = next(w for w in attached.warnings if w.startswith("implausible ncu counter values dropped"))
    assert column in warning or (how == "rate" and "DRAM bytes" in warning)
    kept = attached.counters.reset_index(drop=True)
    assert np.isnan(kept.loc[row, column])
    # Nothing else in the row or the frame was touched.
    others = [
        c
        for c in ("dram_read_bytes", "dram_write_bytes", "l2_bytes", "tensor_pipe_pct", "duration_ns")
        if not (c == column or (how == "rate" and column.startswith("dram") and c.startswith("dram")))
    ]
    original = run_counters.frame.reset_index(drop=True)
    for other in others:
        assert kept[other].equals(original[other]), other
    metrics = compute_metrics(attached, peaks)
    if "ncu_dram_bytes_per_s" in metrics:
        assert metrics["ncu_dram_bytes_per_s"].value <= TOLERANCE * peaks.dram
