"""JSON read back from files hybrid did not necessarily write (a received run directory, a hand-edited
file): keep the fields whose value has the type the reader expects, and name the others."""

from __future__ import annotations

import math

NUMBER = (int, float)


def _fits(value: object, types: tuple[type, ...]) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is no count
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, types)


def typed_fields(data: dict, types: dict[str, tuple[type, ...]], where: str, problems: list[str]) -> dict:
    """`data` without the listed fields whose value has another type (each named in `problems`)."""
    clean = {}
    for key, value in data.items():
        if key in types and not _fits(value, types[key]):
            problems.append(f"{where}: `{key}` holds {type(value).__name__} {value!r:.40}, left out")
            continue
        clean[key] = value
    return clean


def text_items(values: list, where: str, problems: list[str]) -> list[str]:
    kept = [v for v in values if isinstance(v, str)]
    if len(kept) < len(values):
        problems.append(f"{where}: {len(values) - len(kept)} entries that are not text left out")
    return kept
