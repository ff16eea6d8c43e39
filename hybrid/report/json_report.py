"""results.json: strict JSON (no NaN/Infinity tokens, which many JSON readers reject), written
atomically so a reader or an interrupted run never sees half a file."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

from hybrid.files import write_file


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


def results_to_json(results: dict) -> str:
    return json.dumps(to_jsonable(results), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_results(results: dict, path: str | os.PathLike) -> Path:
    """Write results.json atomically (hybrid.files: temporary file, then rename; never through a link)."""
    return write_file(path, results_to_json(results), durable=True)
