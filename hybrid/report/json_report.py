"""results.json: strict JSON (no NaN/Infinity tokens, which many JSON readers reject), written
atomically so a reader or an interrupted run never sees half a file."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

from hybrid.files import write_file
from hybrid.report.safe_text import escape_json_text


def to_jsonable(value: object) -> object:
    """Plain JSON types: numpy scalars and arrays to Python, NaN/inf to None (a missing number, not a
    value), dataclasses (Finding, Metric) to dicts, paths and other objects to strings."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if hasattr(value, "tolist"):  # numpy scalars and arrays, without importing numpy here
        return to_jsonable(value.tolist())
    return str(value)


INDENT = "  "


def _is_flat(value: object) -> bool:
    return isinstance(value, list) and not any(isinstance(item, (dict, list)) for item in value)


def _dump(value: object, depth: int) -> str:
    """Indented JSON, except that a list of plain values (a shape, a timeline event) stays on one line:
    the timeline's events would otherwise take one line per number."""
    if isinstance(value, dict) and value:
        inner = INDENT * (depth + 1)
        items = ",\n".join(
            f"{inner}{json.dumps(key, ensure_ascii=False)}: {_dump(item, depth + 1)}"
            for key, item in value.items()
        )
        return f"{{\n{items}\n{INDENT * depth}}}"
    if isinstance(value, list) and value and not _is_flat(value):
        inner = INDENT * (depth + 1)
        return (
            "[\n" + ",\n".join(f"{inner}{_dump(item, depth + 1)}" for item in value) + f"\n{INDENT * depth}]"
        )
    return json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(", ", ": "))


def results_to_json(results: dict) -> str:
    """The document as strict JSON text; characters a terminal acts on are escaped (safe_text), so
    `--json` on a terminal is as safe as the report."""
    return escape_json_text(_dump(to_jsonable(results), 0)) + "\n"


def write_results(results: dict, path: str | os.PathLike) -> Path:
    """Write results.json atomically (hybrid.files: temporary file, then rename; never through a link)."""
    return write_file(path, results_to_json(results), durable=True)
