"""The baseline replay reproduces every measured step of every committed real nsys export (H200
captures: the planted suite, the model runs, the DDP job ranks, the probe) within 3%. The exports in
examples/ are results only (no .sqlite), so there is nothing of theirs to replay."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from hybrid.load.nsys_export import load_nsys_export
from hybrid.profile import Profile
from hybrid.replay.graph import ReplayUnavailable, build_graph
from hybrid.replay.simulate import replay_step

FIXTURES = Path(__file__).parent / "fixtures"
EXPORTS = sorted(
    [
        *FIXTURES.glob("planted/*/run/nsys/profile.sqlite"),
        *FIXTURES.glob("runs/*/nsys/profile.sqlite"),
        *FIXTURES.glob("jobs/*/rank-*/nsys/profile.sqlite"),
        FIXTURES / "h200-probe" / "nsys_matmul_copy.sqlite",
    ]
)
TOLERANCE = 0.03


def test_every_export_is_found():
    assert len(EXPORTS) >= 30


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: "/".join(p.relative_to(FIXTURES).parts[:2]))
def test_baseline_replay_reproduces_each_measured_step(export):
    graph = build_graph(load_nsys_export(export))
    replay = replay_step(graph)
    measured = graph.measured_step_ns
    assert len(measured) >= 5 and (measured > 0).all()
    assert np.abs(replay.step_ns / measured - 1).max() <= TOLERANCE
    # Every op ran on the device as measured (the replay is the timeline, not only its step sums).
    assert np.abs(replay.d_end - graph.d_end).max() <= TOLERANCE * measured.mean()


def test_measured_windows_match_the_metrics_step_windows():
    from hybrid.analysis.steps import step_windows

    profile = load_nsys_export(
        FIXTURES / "planted" / "sync_item_per_microstep" / "run" / "nsys" / "profile.sqlite"
    )
    graph = build_graph(profile)
    assert np.allclose(graph.measured_step_ns, step_windows(profile)["dur_ns"].to_numpy(), rtol=1e-9)


def test_an_export_without_synchronization_records_says_so_and_still_replays(tmp_path):
    export = tmp_path / "profile.sqlite"
    shutil.copy(FIXTURES / "planted" / "sync_item_per_microstep" / "run" / "nsys" / "profile.sqlite", export)
    with sqlite3.connect(export) as db:
        db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    graph = build_graph(load_nsys_export(export))
    assert any("20 stream synchronizations" in note and "whole device" in note for note in graph.notes)
    assert np.abs(replay_step(graph).step_ns / graph.measured_step_ns - 1).max() <= TOLERANCE


def test_a_profile_without_an_nsys_timeline_says_why():
    with pytest.raises(ReplayUnavailable, match="nsys"):
        build_graph(Profile())
