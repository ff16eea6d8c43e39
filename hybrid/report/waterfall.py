""" "Where the step went": the ledger's waterfall (results.json `ledger.waterfall`) for the terminal and
the HTML report. One row per cause, busy first and then idle in the ledger's precedence, each bar
starting where the previous one ended, so the last ends at the mean step by construction."""

from __future__ import annotations

import html

from rich.text import Text

from hybrid.report.units import format_pct, format_value

BAR_WIDTH = 34  # terminal columns of a bar spanning the whole step
LABEL_WIDTH = 38  # with the bar and the numbers, within the report's 100 columns
BUSY_STYLE, IDLE_STYLE = "green", "red"
BUSY_COLOR, IDLE_COLOR = "#2da44e", "#cf222e"


def rows(results: dict) -> list[dict]:
    return list((results.get("ledger") or {}).get("waterfall") or [])


def _step_ms(results: dict) -> float:
    return float((results.get("ledger") or {}).get("step_time_ms") or 0.0)


def terminal_lines(results: dict) -> list[Text]:
    """The waterfall as text lines: label, a bar at its place in the step, time and share of the step."""
    step = _step_ms(results)
    if not rows(results) or step <= 0:
        return []
    out = [
        Text(
            f"Where the step went ({format_value(step, 'ms')} per step, each nanosecond once)  [ledger]",
            style="bold",
        )
    ]
    for row in rows(results):
        start = round(BAR_WIDTH * row["start_ms"] / step)
        width = max(1, round(BAR_WIDTH * (row["start_ms"] + row["ms"]) / step) - start)
        out.append(
            Text.assemble(
                (f"  {row['state']:<4} ", "dim"),
                (f"{row['label'][:LABEL_WIDTH]:<{LABEL_WIDTH}} ", ""),
                (
                    " " * start + "█" * width + " " * max(0, BAR_WIDTH - start - width),
                    BUSY_STYLE if row["state"] == "busy" else IDLE_STYLE,
                ),
                (f" {format_value(row['ms'], 'ms'):>9} {format_pct(row['pct_of_step']):>5}%", ""),
            )
        )
    return out


def html_block(results: dict) -> str:
    """The waterfall as an HTML section: a table whose rows carry an SVG bar at their place in the step."""
    step = _step_ms(results)
    if not rows(results) or step <= 0:
        return ""
    body = []
    for row in rows(results):
        x, width = 100 * row["start_ms"] / step, max(0.3, 100 * row["ms"] / step)
        color = BUSY_COLOR if row["state"] == "busy" else IDLE_COLOR
        bar = (
            f'<svg viewBox="0 0 100 4" preserveAspectRatio="none" width="100%" height="12" role="img">'
            f'<rect x="{x:.3f}" y="0" width="{width:.3f}" height="4" fill="{color}"/></svg>'
        )
        body.append(
            f"<tr><td>{html.escape(row['state'])}</td><td>{html.escape(row['label'])}</td>"
            f'<td style="width:45%">{bar}</td><td class="num">{html.escape(format_value(row["ms"], "ms"))}'
            f'</td><td class="num">{format_pct(row["pct_of_step"])}%</td></tr>'
        )
    return (
        f'<h2>Where the step went</h2><p class="muted">The mean steady step of '
        f"{html.escape(format_value(step, 'ms'))}"
        ", cut into causes (each nanosecond once): busy time by each kernel's first shortfall, idle time by "
        "what the host was doing.</p><table><tr><th>state</th><th>cause</th><th></th><th>ms/step</th>"
        f"<th>of step</th></tr>{''.join(body)}</table>"
    )
