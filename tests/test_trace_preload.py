"""The torch trace read in a thread while the nsys pass runs (hybrid.collect.preload) is the trace read in
place: the same operators and kernels, the same InputError for a damaged one, and no thread on a box with
fewer than MIN_CPUS cores. On a committed H100 capture's trace."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from hybrid.collect.preload import MIN_CPUS, preload_trace
from hybrid.errors import InputError
from hybrid.load.torch_trace import load_torch_trace
from hybrid.pipeline import analyze_artifacts, load_run_dir

RUN = Path(__file__).resolve().parent / "fixtures" / "runs" / "h100-sync-cuda-synchronize"


def test_the_preloaded_trace_is_the_trace_read_in_place():
    trace = RUN / "torch" / "trace.json.gz"
    preload = preload_trace(trace, cpus=MIN_CPUS)
    assert preload is not None
    run, torch_profile, nsys_profile, csv = load_run_dir(RUN, notes=[], load_torch=preload.loader())
    in_place = load_torch_trace(trace)
    pd.testing.assert_frame_equal(torch_profile.ops, in_place.ops)
    pd.testing.assert_frame_equal(torch_profile.kernels, in_place.kernels)
    first = analyze_artifacts(run, torch_profile, nsys_profile, csv)
    _, again_torch, again_nsys, _ = load_run_dir(RUN, notes=[])
    second = analyze_artifacts(run, again_torch, again_nsys, csv)
    assert first["diagnosis"]["primary_bottleneck"]["id"] == second["diagnosis"]["primary_bottleneck"]["id"]
    assert first["diagnosis"]["bottlenecks"] == second["diagnosis"]["bottlenecks"]


def test_a_damaged_trace_fails_as_it_does_in_place(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents": [')
    with pytest.raises(InputError) as in_place:
        load_torch_trace(trace)
    preload = preload_trace(trace, cpus=MIN_CPUS)
    with pytest.raises(InputError) as preloaded:
        preload.loader()(trace)
    assert preloaded.value.cause == in_place.value.cause


def test_a_small_box_keeps_its_cores_for_the_workload():
    assert preload_trace(RUN / "torch" / "trace.json.gz", cpus=MIN_CPUS - 1) is None
    assert preload_trace(None, cpus=64) is None
