"""Exports too large to hold are analyzed in a window of whole steps around the middle of the capture
(nsys_pass.WINDOW_KERNELS): scaled-up real H200 captures (benchmarks/make_large_export.py), with the window
shrunk so that a test-sized export needs one."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from hybrid.analysis.steps import step_windows
from hybrid.load import nsys_export as nsys_pass
from hybrid.load.nsys_export import load_nsys_export

ROOT = Path(__file__).parents[1]
LAUNCH_RUN = ROOT / "tests" / "fixtures" / "planted" / "launch_batch1_deep_mlp" / "run"
LAUNCH_INJECT = LAUNCH_RUN / "nsys" / "inject.json"


def _make_large_export():
    path = ROOT / "benchmarks" / "make_large_export.py"
    spec = importlib.util.spec_from_file_location("make_large_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_large_export


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("window")
    make = _make_large_export()
    marked, bare = folder / "marked.sqlite", folder / "bare.sqlite"
    # The probe's steps replicated to ~100k kernels in NVTX steps of ~1000; the launch loop, bare, ~300k
    # (73 iterations of 4,097 kernels).
    make(100_000, marked, kernels_per_step=1000)
    make(300_000, bare, 0, template="launch", bare=True)
    return {"marked": marked, "bare": bare}


@pytest.fixture
def small_window(monkeypatch):
    monkeypatch.setattr(nsys_pass, "WINDOW_KERNELS", 30_000)


@pytest.fixture
def window_of_30_iterations(monkeypatch):
    # The outer loop is found when the window's second half holds 8 iterations (periodicity.REGULAR_COUNT).
    monkeypatch.setattr(nsys_pass, "WINDOW_KERNELS", 30 * 4097)


def test_a_small_export_is_read_whole(exports):
    profile = load_nsys_export(exports["marked"])
    assert "analyzed_window_ns" not in profile.extras["nsys"]
    assert not any("to keep memory bounded" in w for w in profile.warnings)


def test_marked_steps_in_the_window_are_whole_and_named(exports, small_window):
    whole = nsys_pass.WINDOW_KERNELS
    profile = load_nsys_export(exports["marked"])
    t0, t1 = profile.extras["nsys"]["analyzed_window_ns"]
    assert profile.extras["nsys"]["export_kernels"] > 3 * whole
    # Only the window's kernels were read (plus the margin after it), and every step lies inside it.
    assert len(profile.kernels) < 1.3 * whole
    assert (profile.steps["start_ns"] >= t0).all() and (profile.steps["end_ns"] <= t1).all()
    assert len(profile.steps) >= 15
    # The steps keep their own numbers and all of their kernels: each holds the same work.
    per_step = profile.kernels[profile.kernels["step"] >= 0].groupby("step").size()
    assert per_step.index.min() > 0 and per_step.nunique() == 1
    warning = next(w for w in profile.warnings if "to keep memory bounded" in w)
    assert f"analyzed the {len(profile.steps)} step(s)" in warning and "its middle" in warning


def test_bare_steps_in_the_window_are_the_loop_iteration(exports, window_of_30_iterations):
    profile = load_nsys_export(exports["bare"])
    assert profile.step_unit == "one repeat of a 4097-call CUDA sequence"
    assert "read for the analyzed window" in profile.step_reason
    t0, t1 = profile.extras["nsys"]["analyzed_window_ns"]
    assert (profile.steps["start_ns"] >= t0).all() and (profile.steps["end_ns"] <= t1).all()
    assert (profile.kernels[profile.kernels["step"] >= 0].groupby("step").size() == 4097).all()
    planted_ms = json.loads(LAUNCH_INJECT.read_text())["step_time_ms"]
    assert step_windows(profile)["dur_ns"].median() / 1e6 == pytest.approx(planted_ms, rel=0.05)
    assert profile.extras["nsys"]["kernels_without_launch_record"] == 0
