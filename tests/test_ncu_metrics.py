"""The metric set: every name exists on Hopper (checked against a verbatim excerpt of
`ncu --query-metrics --chip gh100` and a real raw-page capture), and the derived columns."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from hybrid.profile import COUNTER_COLUMNS
from nsight import ncu_metrics as m

FIXTURES = Path(__file__).parent / "fixtures"
QUERY_EXCERPT = FIXTURES / "ncu" / "gh100-query-metrics-excerpt.txt"
RAW_CAPTURE = FIXTURES / "h200-probe" / "ncu_raw_page.csv"

# Rollups and ratio suffixes ncu accepts after a base counter/ratio/throughput name.
COUNTER_SUFFIXES = {".sum", ".avg.pct_of_peak_sustained_active", ".avg.per_second"}
RATIO_SUFFIXES = {".pct"}
THROUGHPUT_SUFFIXES = {".avg.pct_of_peak_sustained_elapsed"}


def query_list() -> dict[str, str]:
    """base metric name -> metric type, from the excerpt."""
    types = {}
    for line in QUERY_EXCERPT.read_text().splitlines()[4:]:
        parts = line.split()
        types[parts[0]] = parts[1]
    return types


def test_every_metric_exists_on_gh100_with_a_suffix_fitting_its_type():
    types = query_list()
    raw_header = next(csv.reader(RAW_CAPTURE.open()))
    for metric in m.METRICS:
        base, _, rest = metric.partition(".")
        if base not in types:
            # Launch-derived metrics are not in the query list; the real capture shows ncu reports them.
            assert metric in raw_header, f"{metric} is neither in the gh100 metric list nor in a capture"
            continue
        suffix = "." + rest
        allowed = {"Counter": COUNTER_SUFFIXES, "Ratio": RATIO_SUFFIXES, "Throughput": THROUGHPUT_SUFFIXES}
        assert suffix in allowed[types[base]], f"{metric}: {types[base]} metric with suffix {suffix}"


def test_no_metric_requested_twice_and_hmma_only_variants_avoided():
    assert len(set(m.METRICS)) == len(m.METRICS)
    # The hmma-only tensor op counters miss wgmma; the broad tensor pipe counts DMMA/HFMA2.MMA.
    assert not any("ops_path_tensor_op_hmma" in name for name in m.METRICS)
    assert "sm__pipe_tensor_cycles_active" not in {name.split(".")[0] for name in m.METRICS}


def test_counter_columns_cover_the_contract():
    row = m.counter_columns({})
    assert set(row) | {"name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"} == set(
        COUNTER_COLUMNS
    )


def test_flops_are_add_plus_mul_plus_twice_fma():
    fadd, fmul, ffma = m.SCALAR_FLOP_OPS["fp32"]
    row = m.counter_columns({fadd: 3.0, fmul: 5.0, ffma: 7.0})
    assert row["fp32_flops"] == 3 + 5 + 2 * 7
    assert math.isnan(row["fp64_flops"])  # not measured is not zero


def test_tensor_flops_sum_measured_precisions_only():
    row = m.counter_columns(
        {m.TENSOR_OPS_BY_PRECISION["bf16"]: 2 * 4096**3, m.TENSOR_OPS_BY_PRECISION["fp16"]: 0.0}
    )
    assert row["tensor_flops"] == 2 * 4096**3
    assert row["tensor_flops_by_precision"]["bf16"] == 2 * 4096**3
    assert math.isnan(row["tensor_flops_by_precision"]["tf32"])
    assert math.isnan(m.counter_columns({})["tensor_flops"])


def test_sectors_per_request_guards_zero_requests():
    assert (
        m.counter_columns({m.GLOBAL_LOAD_SECTORS: 40.0, m.GLOBAL_LOAD_REQUESTS: 10.0})[
            "global_load_sectors_per_request"
        ]
        == 4.0
    )
    assert math.isnan(
        m.counter_columns({m.GLOBAL_LOAD_SECTORS: 0.0, m.GLOBAL_LOAD_REQUESTS: 0.0})[
            "global_load_sectors_per_request"
        ]
    )


def test_limiter_none_at_full_theoretical_occupancy():
    limits = {name: 8.0 for name in m.OCCUPANCY_LIMITS.values()}
    assert m.counter_columns({**limits, m.THEORETICAL_OCCUPANCY: 100.0})["occupancy_limiter"] is None
    tied = {**limits, m.THEORETICAL_OCCUPANCY: 50.0}
    assert m.counter_columns(tied)["occupancy_limiter"] == "registers"
    smem = {**tied, m.OCCUPANCY_LIMITS["shared_memory"]: 2.0}
    assert m.counter_columns(smem)["occupancy_limiter"] == "shared_memory"
