"""How every renderer writes a number: three significant digits, the unit scaled to the value (ns/µs/ms/s,
B/KB/MB/GB, B/s..TB/s, FLOP/s..PFLOP/s), counts whole, a count noun in the singular for one, and a
percentage too small to read as "<0.1%" rather than "0.00107%". The terminal, HTML and comparison
renderers all call `format_value`, so one reading looks the same in each of them."""

from __future__ import annotations

import math
from typing import TypeGuard

from hybrid.numbers import SIGNIFICANT_DIGITS, significant

SMALLEST_PCT = 0.1  # below this a share reads "<0.1%": its digits carry no information for the reader

NS_PER = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_DURATION_STEPS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))
_DECIMAL_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
# Units written with SI prefixes; bytes take "KB" (capital K) as storage units are usually written.
_SCALED_UNITS = ("B", "B/s", "FLOP", "FLOP/s")
_PERCENT_UNITS = ("%", "% of peak")
_IRREGULAR_SINGULAR = {"copies": "copy"}


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_count(value: float) -> str:
    """Counts of things: integers whole (1,234 launches), averages per step to three digits (4.2 syncs)."""
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return significant(float(value))


def format_pct(value: float) -> str:
    """A share: three significant digits, and "<0.1%" for a share that rounds to nothing."""
    if 0 < abs(value) < SMALLEST_PCT:
        return f"{'-' if value < 0 else ''}<{SMALLEST_PCT:g}"
    return significant(value)


def format_duration(value: float, unit: str) -> str:
    """A duration given in `unit` (ns, us, ms, s), written in the unit that keeps it between 1 and 1000."""
    if value == 0:
        return f"0 {'µs' if unit == 'us' else unit}"
    # Rounded first, so 999.96 µs reads "1 ms", not "1,000 µs".
    ns = float(f"{value * NS_PER[unit]:.{SIGNIFICANT_DIGITS}g}")
    scale, name = next((scale, name) for scale, name in _DURATION_STEPS if abs(ns) >= scale or name == "ns")
    return f"{significant(ns / scale)} {name}"


def format_scaled(value: float, unit: str) -> str:
    """Bytes, FLOPs and their rates with a decimal prefix: 4.81e12 B/s -> "4.81 TB/s", 4 B -> "4 B"."""
    rounded = float(f"{value:.{SIGNIFICANT_DIGITS}g}")  # 999,999 B reads "1 MB", not "1,000 KB"
    for scale, prefix in _DECIMAL_PREFIXES:
        if abs(rounded) >= scale:
            symbol = "K" if prefix == "k" and unit.startswith("B") else prefix
            return f"{significant(rounded / scale)} {symbol}{unit}"
    return f"{format_count(value) if unit == 'B' else significant(value)} {unit}"


def noun(unit: str, value: object) -> str:
    """A count noun agreeing with its number: 1 break, 2 breaks, 1 copy."""
    if value != 1 or not unit.isalpha() or not unit.endswith("s") or len(unit) < 3:
        return unit
    return _IRREGULAR_SINGULAR.get(unit, unit[:-1])


def format_value(value: object, unit: str = "") -> str:
    """A value with its unit, scaled for reading. None and non-finite numbers read "n/a": a missing
    measurement is not zero. Text values are returned as they are."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if not is_number(value):
        return f"{value} {unit}".strip()
    if unit in NS_PER:
        return format_duration(float(value), unit)
    if unit in _SCALED_UNITS:
        return format_scaled(float(value), unit)
    if unit in _PERCENT_UNITS:
        return f"{format_pct(float(value))}{unit}"
    if unit == "x":
        return f"{significant(float(value))}x"
    if unit in ("", "count") or unit.isalpha():
        text = format_count(value) if unit != "" or isinstance(value, int) else significant(float(value))
        return f"{text} {noun(unit, value)}".strip() if unit != "count" else text
    return f"{significant(float(value))} {unit}"


def _signed(delta: float) -> str:
    if 0 < abs(delta) < SMALLEST_PCT:
        return f"<{SMALLEST_PCT:g}"  # a sign on "less than 0.1" says nothing the reader can use
    return ("+" if delta > 0 else "") + significant(delta)


def format_pp(delta: float) -> str:
    """A change between two percentages, in percentage points: "+2.35 pp"."""
    return f"{_signed(delta)} pp"


def format_change_pct(delta_pct: float) -> str:
    """A relative change: "+12.3%", "-0.5%", "<0.1%"."""
    return f"{_signed(delta_pct)}%"
