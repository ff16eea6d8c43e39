"""Renderers of one results dict (the results.json contract, hybrid/schema.py): terminal, JSON, HTML,
and a comparison of two runs. They read only that dict, so a run re-analyzed from disk renders the
same as a fresh one. The helpers below are the formatting every renderer shares, so a value reads
the same (and carries the same provenance wording) in each of them."""

from __future__ import annotations

import math
import re

from hybrid.provenance import source_label
from hybrid.rules.base import SEVERITY_RANK

__all__ = ["findings_by_impact", "format_value", "short_name", "source_label", "sources_of"]

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_number(value: float) -> str:
    """Three significant digits for readings, integers kept whole (counts of calls, steps)."""
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return "n/a"
    if value == int(value) and abs(value) < 1e6:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:.3g}"


def format_value(value: object, unit: str = "") -> str:
    """A value with its unit, scaled for reading: bytes in binary units, rates (FLOP/s, B/s) with SI
    prefixes. None and non-finite numbers read 'n/a' (a missing measurement is not zero)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if not _is_number(value):
        return f"{value} {unit}".strip()
    if unit == "B":
        size, index = float(value), 0
        while abs(size) >= 1024 and index < len(_BYTE_UNITS) - 1:
            size, index = size / 1024, index + 1
        return f"{format_number(size if index else int(size))} {_BYTE_UNITS[index]}"
    if unit in ("FLOP/s", "B/s", "FLOP", "bytes/s"):
        for scale, prefix in _SI_PREFIXES:
            if abs(value) >= scale:
                return f"{value / scale:.3g} {prefix}{unit}"
    text = format_number(value)
    if unit == "count":
        return text
    if unit in ("%", "% of peak"):
        return f"{text}{unit}"
    return f"{text} {unit}".strip()


def findings_by_impact(results: dict) -> list[dict]:
    """Findings ranked as the reader should meet them: severity first, then time lost per step."""
    findings = list((results.get("diagnosis") or {}).get("bottlenecks") or [])
    return sorted(findings, key=lambda f: (-SEVERITY_RANK.get(f.get("severity"), -1),
                                           -(f.get("time_lost_ms") or 0.0)))


def sources_of(finding: dict) -> list[str]:
    """Distinct provenance labels of a finding's evidence, in first-seen order."""
    labels: list[str] = []
    for item in finding.get("evidence") or []:
        label = source_label(str(item.get("source", "")))
        if label not in labels:
            labels.append(label)
    return labels


_TEMPLATE_PARAM_LIST = re.compile(r"\((?:[^()]|\([^()]*\))*\)$")  # trailing "(int, T2, T3)"
_NAMESPACE = re.compile(r"(?:\b[A-Za-z_]\w*|<unnamed>|\(anonymous namespace\))::")
_INT_CAST = re.compile(r"\((?:int|unsigned int|long|unsigned long|bool)\)(-?\d+)")


def _collapse_templates(name: str, keep_depth: int) -> str:
    """Replace template arguments nested deeper than keep_depth with '<...>'."""
    out, depth = [], 0
    for char in name:
        if char == "<":
            depth += 1
            if depth == keep_depth + 1:
                out.append("<...")
            if depth > keep_depth:
                continue
        elif char == ">" and depth > 0:
            depth -= 1
            if depth == keep_depth:
                out.append(">")
            if depth >= keep_depth:
                continue
        elif depth > keep_depth:
            continue
        out.append(char)
    return "".join(out)


def short_name(name: str, width: int = 72) -> str:
    """A C++ kernel name cut to what identifies it on one terminal line: no return type, parameter list
    or namespaces, template arguments kept one level deep (the functor names an elementwise kernel),
    then truncated in the middle. JSON and HTML keep the full name."""
    text = name.strip()
    if len(text) <= width:
        return text
    text = text.removeprefix("void ")
    text = _TEMPLATE_PARAM_LIST.sub("", text)
    text = _NAMESPACE.sub("", text)
    text = _INT_CAST.sub(r"\1", text)
    for depth in (2, 1, 0):
        collapsed = _collapse_templates(text, depth)
        if len(collapsed) <= width:
            return collapsed
    keep = (width - 3) // 2
    return f"{collapsed[:keep]}...{collapsed[-(width - 3 - keep):]}"
