"""How a number is counted and written: the time units every figure is converted with (the loaders and the
analysis count nanoseconds; a figure reads in ms or µs), and its text: three significant digits, thousands
grouped. Shared by the evidence the analysis writes (a replayed fix's basis) and every renderer
(hybrid.report.units), so one figure reads the same wherever it appears."""

from __future__ import annotations

import math

NS_PER_US = 1e3
NS_PER_MS = 1e6

SIGNIFICANT_DIGITS = 3


def significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> str:
    """`value` to `digits` significant digits, thousands grouped, no trailing zeros: 12175.2 -> "12,200",
    0.00147 -> "0.00147", 40.0 -> "40"."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else "n/a"
    rounded = float(f"{value:.{digits}g}")
    magnitude = math.floor(math.log10(abs(rounded)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{rounded:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text
