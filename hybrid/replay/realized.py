"""What the fixes `hybrid run --verify` realized against what the replay predicted, kept per GPU and fix
across runs in realized.json beside the calibration cache (hybrid.replay.calibrate.cache_dir), and
the replay's error on a GPU drawn from it: the median of |realized - predicted| / realized over its verified
fixes. The ratios are recorded and reported, not applied to predictions: one run's fix gives one ratio per
workload, and a ratio learned on one workload's step says little about another's yet."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path

from hybrid.errors import OutputError
from hybrid.files import write_file
from hybrid.replay.calibrate import cache_dir

CACHE_NAME = "realized.json"
# Entries kept per GPU and fix: the latest, so a cache shared by years of runs stays small.
KEEP_PER_FIX = 50


def realized_cache_path() -> Path:
    return cache_dir() / CACHE_NAME


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(device: str, entries: list[dict], path: Path | None = None) -> dict:
    """Add `entries` ({fix, predicted_ms, realized_ms, error, command}) under `device` and return the
    device's summary (see summary). A cache that cannot be written leaves the summary of what it held."""
    path = path or realized_cache_path()
    data = _read(path)
    by_fix = data.setdefault(device, {})
    for entry in entries:
        kept = by_fix.setdefault(entry["fix"], [])
        kept.append({**entry, "at": round(time.time())})
        del kept[:-KEEP_PER_FIX]
    if entries:
        # A cache that cannot be written (a read-only home) costs the history this run, not the run.
        with contextlib.suppress(OutputError):
            write_file(path, json.dumps(data, indent=1, sort_keys=True) + "\n", cache=True)
    return summary(data.get(device) or {}, path)


def summary(by_fix: dict, path: Path) -> dict:
    """{"verified": n, "median_error_pct", "by_fix": {fix: {n, median_ratio}}, "applied": False, "cache"}:
    the replay's error on this GPU over every verified fix the cache holds for it."""
    errors = [e["error"] for entries in by_fix.values() for e in entries if isinstance(e.get("error"), float)]
    return {
        "verified": len(errors),
        "median_error_pct": 100.0 * statistics.median(errors) if errors else None,
        "by_fix": {
            fix: {
                "n": len(entries),
                "median_realized_over_predicted": statistics.median(
                    e["realized_ms"] / e["predicted_ms"] for e in entries
                ),
            }
            for fix, entries in sorted(by_fix.items())
            if entries
        },
        "applied": False,
        "cache": str(path),
    }
