"""The ncu CSV reader on the two real H200 captures, checked against the raw files read
independently with the csv module, and on malformed or empty input."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from hybrid.profile import COUNTER_COLUMNS
from nsight.errors import UnreadableInput
from nsight.ncu_csv import parse_launch_dims, parse_ncu_csv, parse_number

PROBE = Path(__file__).parent / "fixtures" / "h200-probe"
STDOUT_CSV = PROBE / "ncu_metrics_stdout.csv"
RAW_CSV = PROBE / "ncu_raw_page.csv"


def long_rows() -> list[dict[str, str]]:
    lines = [line for line in STDOUT_CSV.read_text().splitlines() if line.startswith('"')]
    return list(csv.DictReader(lines))


def raw_rows() -> tuple[list[dict[str, str]], dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(RAW_CSV.read_text())))
    return rows[1:], rows[0]  # data rows, units row


def number(text: str) -> float:
    return float(text.replace(",", ""))


def test_stdout_long_format_one_row_per_kernel_with_values_from_the_file():
    parsed = parse_ncu_csv(STDOUT_CSV)
    rows = long_rows()
    ids = sorted({int(r["ID"]) for r in rows})
    # nsight names the columns; they are the Profile's counter contract, which hybrid.load conforms to.
    assert sorted(parsed.frame.columns) == sorted(COUNTER_COLUMNS)
    assert len(parsed.frame) == len(ids) == 22  # the program's "done ..." line and ==PROF== lines skipped
    assert parsed.process_ids == [943]
    by_metric = {(int(r["ID"]), r["Metric Name"]): r for r in rows}
    for i, ncu_id in enumerate(ids):
        row = parsed.frame.iloc[i]
        first = by_metric[(ncu_id, "dram__bytes_read.sum")]
        assert row["name"] == first["Kernel Name"]
        assert row["dram_read_bytes"] == number(first["Metric Value"])  # "268,477,952" -> 268477952
        assert row["dram_write_bytes"] == number(by_metric[(ncu_id, "dram__bytes_write.sum")]["Metric Value"])
        assert row["duration_ns"] == number(by_metric[(ncu_id, "gpu__time_duration.sum")]["Metric Value"])
        assert row["l2_hit_pct"] == number(by_metric[(ncu_id, "lts__t_sector_hit_rate.pct")]["Metric Value"])
        assert (row["grid_x"], row["grid_y"], row["grid_z"]) == parse_launch_dims(first["Grid Size"])
        assert (row["block_x"], row["block_y"], row["block_z"]) == parse_launch_dims(first["Block Size"])


def test_stdout_capture_reports_the_metrics_it_lacks():
    parsed = parse_ncu_csv(STDOUT_CSV)
    captured = {r["Metric Name"] for r in long_rows()}
    assert "lts__t_bytes.sum" in parsed.missing_metrics
    assert "dram__bytes_read.sum" not in parsed.missing_metrics
    assert not set(parsed.missing_metrics) & captured
    # fadd/fmul were not collected, so fp32 FLOPs are unknown rather than FFMA-only.
    assert parsed.frame["fp32_flops"].isna().all()
    assert parsed.replay_passes is None  # the details page does not carry it


def test_raw_page_units_row_converted_to_base_units():
    parsed = parse_ncu_csv(RAW_CSV)
    rows, units = raw_rows()
    assert units["gpu__time_duration.sum"] == "us" and units["sm__cycles_elapsed.avg.per_second"] == "Ghz"
    assert len(parsed.frame) == len(rows) == 6
    for row, (_, got) in zip(rows, parsed.frame.iterrows(), strict=False):
        assert got["name"] == row["Kernel Name"]
        assert got["duration_ns"] == pytest.approx(float(row["gpu__time_duration.sum"]) * 1e3)
        assert got["sm_clock_hz"] == pytest.approx(float(row["sm__cycles_elapsed.avg.per_second"]) * 1e9)
        assert got["l2_hit_pct"] == min(float(row["lts__t_sector_hit_rate.pct"]), 100.0)
        assert got["theoretical_occupancy_pct"] == float(row["sm__maximum_warps_per_active_cycle_pct"])
    assert parsed.replay_passes == max(int(float(r["profiler__replayer_passes"])) for r in rows)
    assert "dram__bytes_read.sum" in parsed.missing_metrics  # this capture has only DRAM rates


def test_raw_page_l2_hit_rate_above_100_is_clamped():
    rows, _ = raw_rows()
    assert float(rows[0]["lts__t_sector_hit_rate.pct"]) > 100  # 100.07 in the capture
    assert parse_ncu_csv(RAW_CSV).frame["l2_hit_pct"].iloc[0] == 100.0


def test_raw_page_occupancy_limiter_is_the_smallest_block_limit():
    parsed = parse_ncu_csv(RAW_CSV)
    rows, _ = raw_rows()
    for row, limiter in zip(rows, parsed.frame["occupancy_limiter"], strict=False):
        limits = {
            key: float(row[f"launch__occupancy_limit_{key}"])
            for key in ("registers", "shared_mem", "blocks", "warps")
        }
        if float(row["sm__maximum_warps_per_active_cycle_pct"]) >= 100:
            assert limiter is None
        else:
            assert (
                limiter
                == {
                    "registers": "registers",
                    "shared_mem": "shared_memory",
                    "blocks": "block_size",
                    "warps": "warps",
                }[min(limits, key=limits.get)]
            )
    assert parsed.frame["occupancy_limiter"].iloc[2] == "registers"  # the GEMM: 18.75% theoretical


LONG_HEADER = [
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
    "Section Name",
    "Metric Name",
    "Metric Unit",
    "Metric Value",
]


def long_csv(rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(LONG_HEADER)
    writer.writerows(rows)
    return out.getvalue()


def metric_row(ncu_id: str, pid: str, name: str, metric: str, unit: str, value: str) -> list[str]:
    return [
        ncu_id,
        pid,
        "python3",
        "host",
        name,
        "1",
        "7",
        "(128, 1, 1)",
        "(4, 2, 1)",
        "0",
        "9.0",
        "Command line profiler metrics",
        metric,
        unit,
        value,
    ]


def test_commas_and_quotes_inside_kernel_names_stay_one_name():
    name = 'void k<std::pair<int, float>, "tag">(int, T2)'
    text = long_csv([metric_row("0", "10", name, "dram__bytes_read.sum", "byte", "1,024")])
    parsed = parse_ncu_csv(text)
    assert parsed.frame["name"].tolist() == [name]
    assert parsed.frame["dram_read_bytes"].tolist() == [1024.0]
    assert (parsed.frame["grid_x"].item(), parsed.frame["grid_y"].item()) == (4, 2)


def test_na_values_and_unknown_units_become_nan_with_a_note():
    text = long_csv(
        [
            metric_row("0", "10", "k", "dram__bytes_read.sum", "byte", "n/a"),
            metric_row("0", "10", "k", "gpu__time_duration.sum", "fortnight", "3"),
        ]
    )
    parsed = parse_ncu_csv(text)
    assert math.isnan(parsed.frame["dram_read_bytes"].item())
    assert math.isnan(parsed.frame["duration_ns"].item())
    assert any("fortnight" in note for note in parsed.notes)
    assert "dram__bytes_read.sum" in parsed.missing_metrics


def test_several_processes_and_repeated_headers():
    first = long_csv([metric_row("0", "10", "a", "gpu__time_duration.sum", "ns", "5")])
    second = long_csv([metric_row("1", "11", "b", "gpu__time_duration.sum", "ns", "7")])
    parsed = parse_ncu_csv("==PROF== Connected to process 10\n" + first + "program output\n" + second)
    assert parsed.process_ids == [10, 11]
    assert parsed.frame["name"].tolist() == ["a", "b"]
    assert parsed.frame["duration_ns"].tolist() == [5.0, 7.0]


def test_empty_csv_is_clearly_unreadable(tmp_path):
    empty = tmp_path / "counters.csv"
    empty.write_text("")
    with pytest.raises(UnreadableInput, match="no ncu CSV table") as info:
        parse_ncu_csv(empty)
    assert "ncu.log" in info.value.fix


def test_filter_that_matched_nothing_is_named():
    text = (
        "==PROF== Connected to process 943 (/usr/bin/python3.12)\n"
        "==PROF== Disconnected from process 943\n"
        "==WARNING== No kernels were profiled.\n"
    )
    with pytest.raises(UnreadableInput, match="matched no launch"):
        parse_ncu_csv(text)


def test_header_without_rows_is_unreadable():
    with pytest.raises(UnreadableInput):
        parse_ncu_csv(long_csv([]))


def test_missing_file_is_unreadable(tmp_path):
    with pytest.raises(UnreadableInput, match="cannot read"):
        parse_ncu_csv(tmp_path / "absent.csv")


def test_number_and_launch_dims_parsing():
    assert parse_number("146,538,496") == 146538496.0
    assert math.isnan(parse_number("no data"))
    assert parse_launch_dims("(1, 528, 1)") == (1, 528, 1)
    assert parse_launch_dims("") == (-1, -1, -1)
