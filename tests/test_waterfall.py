""" "Where the step went" in the terminal (--verbose) and the HTML report, from a real H200 run's ledger."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from hybrid.pipeline import analyze_run_dir
from hybrid.report.html_report import render_html
from hybrid.report.terminal import REPORT_WIDTH, render_terminal

RUN = Path(__file__).parent / "fixtures" / "runs" / "h200-simple_cnn"
TITLE = "Where the step went"


@cache
def results() -> dict:
    return analyze_run_dir(RUN)


def test_verbose_terminal_report_shows_one_line_per_cause_within_the_width():
    rows = results()["ledger"]["waterfall"]
    text = render_terminal(results(), verbose=True, color=False)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(TITLE))
    shown = lines[first + 1 : first + 1 + len(rows)]
    assert [line.split()[0] for line in shown] == [row["state"] for row in rows]
    assert all(row["label"] in line for row, line in zip(rows, shown, strict=True))
    assert all(len(line) <= REPORT_WIDTH for line in lines[first : first + 1 + len(rows)])
    assert TITLE not in render_terminal(results(), verbose=False, color=False)


def test_html_report_has_the_waterfall_with_a_bar_per_cause():
    doc = render_html(results())
    section = doc[doc.index(f"<h2>{TITLE}</h2>") :]
    section = section[: section.index("</table>")]
    rows = results()["ledger"]["waterfall"]
    assert section.count("<rect ") == len(rows)
    assert all(row["label"] in section for row in rows)
    # Bars are placed where the previous cause ended; the last reaches the end of the step.
    last = rows[-1]
    assert last["start_ms"] + last["ms"] == pytest.approx(results()["ledger"]["step_time_ms"], rel=1e-9)
