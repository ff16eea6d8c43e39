"""What the fixes `hybrid run --verify` realized against what the replay predicted, kept per GPU and fix
across runs in realized.json beside the calibration cache (hybrid.replay.calibrate.cache_dir), and what it
says about the replay on that GPU: its error (the median of |realized - predicted| / realized over the
verified fixes) and, once MIN_RUNS runs have verified a fix there, the correction of that fix's later
replays (the median of the runs' realized/predicted ratios; hybrid.replay.corrected applies it). Each run
keeps the history as it stood when it ran (RUN/realized_history.json), so re-analyzing the run later gives
the same figures whatever the cache has learned since."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from hybrid.errors import OutputError
from hybrid.files import read_regular_text, write_file
from hybrid.numbers import significant as fmt
from hybrid.replay.calibrate import cache_dir

CACHE_NAME = "realized.json"
SNAPSHOT_FILE = "realized_history.json"
# Entries kept per GPU and fix: the latest, so a cache shared by years of runs stays small.
KEEP_PER_FIX = 50
# Verified runs of a fix on a GPU before their ratio corrects its replay there: the median of three moves with
# no single run. On the H200 one run of compile_reduce_overhead realized -106x its prediction (CUDA-graph
# recording measured inside the window of launch_batch1_deep_mlp), another 1.28x (timm ViT training).
MIN_RUNS = 3
METHODS = ("replay", "model")  # what made a prediction (a finding's time_lost_method before correction)


def realized_cache_path() -> Path:
    return cache_dir() / CACHE_NAME


def _read(path: Path) -> dict:
    try:
        data = json.loads(read_regular_text(path))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(device: str, entries: list[dict], path: Path | None = None) -> dict:
    """Add `entries` ({fix, finding, predicted_ms (the replay's, uncorrected), method, realized_ms, error,
    command, run}) under `device` and return the device's summary (see summary). A cache that cannot be
    written leaves the summary of what it held."""
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


def device_key(inject: dict) -> str:
    """The history's key for the device of a pass's inject.json: its GPU's name, "cpu" without one."""
    return str(inject.get("device_name") or "cpu")


def snapshot(run_dir: Path, device: str | None, path: Path | None = None) -> None:
    """Keep in the run directory what the cache holds for `device` now, before this run adds to it: the
    history its analysis corrects the replay with. Nothing is written where the GPU has no history."""
    by_fix = _read(path or realized_cache_path()).get(device) if device else None
    if not isinstance(by_fix, dict) or not by_fix:
        return
    with contextlib.suppress(OutputError, OSError):
        write_file(run_dir / SNAPSHOT_FILE, json.dumps({"device": device, "by_fix": by_fix}, indent=1) + "\n")


def read_snapshot(run_dir: Path) -> dict | None:
    """The history the run in `run_dir` kept (see snapshot), or None."""
    data = _read(run_dir / SNAPSHOT_FILE)
    return data if isinstance(data.get("by_fix"), dict) else None


@dataclass(frozen=True)
class Correction:
    """A fix's realized/predicted ratio on one GPU for the predictions of one method ("replay", or "model":
    a rule's closed form, as every prediction on a CPU): the median over the runs that verified it."""

    fix: str
    method: str
    ratio: float
    ratios: tuple[float, ...]  # one per run, oldest first

    @property
    def reason(self) -> str:
        return f"corrected by {len(self.ratios)} verified runs on this GPU, median ratio {fmt(self.ratio)}"


def _run_key(entry: dict) -> str:
    # Entries written before runs were named (session 6) are told apart by their command and time.
    return str(entry.get("run") or (entry.get("command"), entry.get("at")))


def correction(fix: str, entries: list[dict], method: str = "replay") -> Correction | None:
    """The correction the entries of one fix make to its predictions by `method`, or None below MIN_RUNS
    runs. A run that verified the fix for several findings counts once, with the median of its ratios.
    Entries written before the method was recorded (session 6, on the H200) were replays."""
    by_run: dict[str, list[float]] = {}
    for entry in entries:
        predicted, realized = entry.get("predicted_ms"), entry.get("realized_ms")
        if (entry.get("method") or "replay") != method or not isinstance(realized, (int, float)):
            continue
        if isinstance(predicted, (int, float)) and predicted > 0:
            by_run.setdefault(_run_key(entry), []).append(realized / predicted)
    if len(by_run) < MIN_RUNS:
        return None
    ratios = tuple(statistics.median(run_ratios) for run_ratios in by_run.values())
    return Correction(fix, method, statistics.median(ratios), ratios)


def corrections(by_fix: dict) -> dict[tuple[str, str], Correction]:
    """Every (fix, method) of a GPU's history with MIN_RUNS verified runs."""
    out = {}
    for fix, entries in by_fix.items():
        for method in METHODS:
            if isinstance(entries, list) and (found := correction(fix, entries, method)) is not None:
                out[fix, method] = found
    return out


def median_error_pct(by_fix: dict) -> tuple[float | None, int]:
    """The replay's error on a GPU: the median of the entries' |realized - predicted| / realized, in %, and
    how many entries it is over."""
    errors = [
        e["error"]
        for entries in by_fix.values()
        if isinstance(entries, list)
        for e in entries
        if isinstance(e.get("error"), float)
    ]
    return (100.0 * statistics.median(errors) if errors else None), len(errors)


def summary(by_fix: dict, path: Path) -> dict:
    """{"verified": n, "median_error_pct", "by_fix": {fix: {n, median_realized_over_predicted}}, "applied":
    [{fix, method, ratio, runs}] (the corrections later predictions of the fix on this GPU get), "min_runs",
    "cache"}."""
    error_pct, verified = median_error_pct(by_fix)
    return {
        "verified": verified,
        "median_error_pct": error_pct,
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
        "applied": [
            {"fix": fix, "method": method, "ratio": found.ratio, "runs": len(found.ratios)}
            for (fix, method), found in sorted(corrections(by_fix).items())
        ],
        "min_runs": MIN_RUNS,
        "cache": str(path),
    }
