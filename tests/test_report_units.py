"""Numbers as every renderer writes them (hybrid.report.units): the readings issue 17 found on the real H200
reports ("12,175.2 ms", "0.00107%", "0.00147 ms", "AI 2,730.7 FLOP/B", "1 breaks"), and a scan of the
reports of real H200 run directories, analyzed afresh, for any number with more than three significant
digits or a share written with needless zeros."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hybrid.pipeline import analyze_run_dir
from hybrid.report.common import format_value
from hybrid.report.html_report import render_html
from hybrid.report.terminal import render_terminal
from hybrid.report.units import format_pp, significant

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
# A full hybrid run, a planted run whose slowest step is quoted as text, an nsys-only run with placeholders.
RUNS = [
    FIXTURES / "runs" / "h200-resnet50",
    FIXTURES / "planted" / "cpu_numpy_augment" / "run",
    FIXTURES / "planted" / "healthy_bf16_gemm" / "run",
]


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (12175.2, "ms", "12.2 s"),
        (0.00147, "ms", "1.47 µs"),
        (0.348, "ms", "348 µs"),
        (999.96, "us", "1 ms"),
        (0.00107, "%", "<0.1%"),
        (92.812, "%", "92.8%"),
        (100.0, "%", "100%"),
        (2730.7, "FLOP/B", "2,730 FLOP/B"),
        (7.65e14, "FLOP/s", "765 TFLOP/s"),
        (1.979e15, "FLOP/s", "1.98 PFLOP/s"),
        (4.81e12, "B/s", "4.81 TB/s"),
        (2.04e6, "B/s", "2.04 MB/s"),
        (33554432, "B", "33.6 MB"),
        (4, "B", "4 B"),
        (999999, "B", "1 MB"),
        (1, "breaks", "1 break"),
        (2, "breaks", "2 breaks"),
        (1, "copies", "1 copy"),
        (4.2, "syncs", "4.2 syncs"),
        (1234, "kernels", "1,234 kernels"),
        (3.5, "x", "3.5x"),
        (None, "ms", "n/a"),
        (float("nan"), "ms", "n/a"),
        (0.0, "ms", "0 ms"),
    ],
)
def test_readings(value, unit, shown):
    assert format_value(value, unit) == shown


def test_percentage_points():
    assert format_pp(2.345) == "+2.35 pp" and format_pp(-12.0) == "-12 pp"


# A decimal number in running text: at most three significant digits unless it is a whole count.
NUMBER = re.compile(r"(?<![\w.#])(\d[\d,]*\.\d+)(?![\w.])")


def _too_precise(text: str) -> list[str]:
    bad = []
    for match in NUMBER.finditer(text):
        digits = match.group(1).replace(",", "").replace(".", "").lstrip("0")
        if len(digits) > 3:
            bad.append(match.group(0))
    return bad


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.parts[-2] if p.name == "run" else p.name)
def test_real_reports_write_three_significant_digits(run):
    results = analyze_run_dir(run)
    for verbose in (False, True):
        text = render_terminal(results, verbose=verbose, color=False)
        # The metrics table and evidence lists may quote program text (shapes, reasons); numbers are ours.
        numbers_only = text.split("All metrics")[0]
        assert _too_precise(numbers_only) == [], numbers_only
        assert "0.00" not in numbers_only
    page = render_html(results)
    body = re.sub(r"<[^>]+>", " ", page.split("<h2>Metrics</h2>")[0])
    assert _too_precise(body) == []


def test_significant_keeps_three_digits():
    assert [significant(v) for v in (0.0123456, 1.23456, 123.456, 123456.0)] == [
        "0.0123",
        "1.23",
        "123",
        "123,000",
    ]


def test_a_copy_of_a_few_bytes_has_no_bandwidth():
    # sync_item_per_microstep on the H200: 16 B a step back to the host (.item()), 10.7 GB/s of index
    # copies in.
    metrics = analyze_run_dir(FIXTURES / "planted" / "sync_item_per_microstep" / "run")["metrics"]
    assert metrics["dtoh_bytes"]["value"] < 1024 and "dtoh_bytes_per_s" not in metrics
    assert metrics["htod_bytes_per_s"]["value"] > 1e9
