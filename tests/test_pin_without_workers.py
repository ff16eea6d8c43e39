"""Pinning without DataLoader workers runs on the main thread inside the step: on the H200 (session 7,
benchmarks/results/s7_h200/verify_lightning_fit_cnn) `pin_memory=True` alone took a Lightning CNN's
num_workers=0 plain step from 8.86 to 12.7 ms. Neither the advice nor --verify offers it alone there."""

from __future__ import annotations

import json
from pathlib import Path

from hybrid.rules.advice import RunConfig
from hybrid.rules.base import Context
from hybrid.rules.data_pipeline import pageable_advice
from hybrid.rules.switches import LOADER_PIN_MEMORY, LOADER_WORKERS, switch_for

LIGHTNING = Path(__file__).resolve().parents[1] / "benchmarks/results/s7_h200/verify_lightning_fit_cnn"


def _config() -> RunConfig:
    return RunConfig(json.loads((LIGHTNING / "results.json").read_text())["config"])


def _with_loaders(config: RunConfig, **settings) -> RunConfig:
    raw = json.loads((LIGHTNING / "results.json").read_text())["config"]
    raw["data_loaders"] = [{**d, **settings} for d in raw["data_loaders"]]
    return RunConfig(raw)


def test_the_lightning_run_had_no_workers_and_paid_for_pinning():
    config = _config()
    assert config.data_loaders and all(not d.get("num_workers") for d in config.data_loaders)
    verify = json.loads((LIGHTNING / "results.json").read_text())
    pinned = [
        f["verify"]
        for f in verify["diagnosis"]["bottlenecks"]
        if (f.get("verify") or {}).get("fix") == "loader_pin_memory"
    ]
    assert pinned and pinned[0]["realized_ms"] < 0  # what this change answers


def test_pin_memory_is_not_verified_alone_without_workers():
    config = _config()
    assert "num_workers=0" in (LOADER_PIN_MEMORY.blocked(config) or "")
    assert switch_for((LOADER_PIN_MEMORY,), config) is None
    assert switch_for((LOADER_WORKERS,), config) is LOADER_WORKERS  # the workers switch pins with them
    # With workers, pinning is a switch of its own.
    assert switch_for((LOADER_PIN_MEMORY,), _with_loaders(config, num_workers=4)) is LOADER_PIN_MEMORY


def test_pageable_advice_pins_with_workers_where_there_are_none():
    ctx = Context(metrics={}, config=_config())
    first, copy = pageable_advice(ctx)[:2]
    # The loader's change in the DataLoader finding's words (one change in the report), then the copy's.
    assert first.text == "DataLoader(num_workers=N>0, pin_memory=True)" and "num_workers=0" in first.condition
    assert "non_blocking=True" in copy.text
    with_workers = pageable_advice(Context(metrics={}, config=_with_loaders(_config(), num_workers=4)))[0]
    assert with_workers.text.startswith("DataLoader(..., pin_memory=True)")
