"""Each fix, replayed on a real H200 planted capture, against what the fixed twin saved in plain runs
(plain script - plain twin, no profiler): the replay is fitted to the script's plain step time by
scaling host time (hybrid.replay.predict.fit_host_scale), then replayed with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hybrid.load.nsys_export import load_nsys_export
from hybrid.replay.graph import build_graph
from hybrid.replay.predict import fit_host_scale
from hybrid.replay.simulate import replay_step
from hybrid.replay.transforms import apply, host_scaled
from hybrid.rules.base import Fix

PLANTED = Path(__file__).parent / "fixtures" / "planted"
JOBS = Path(__file__).parent / "fixtures" / "jobs"


def _plain_ms(name: str, folder: str) -> float:
    return json.loads((PLANTED / name / folder / "inject.json").read_text())["step_time_ms"]


def _graph(name: str):
    return build_graph(load_nsys_export(PLANTED / name / "run" / "nsys" / "profile.sqlite"))


def _rules_findings(name: str):
    """The rules' findings on a planted capture, before any stage, and what the analysis built."""
    from hybrid.analysis.analyze import analyze
    from hybrid.pipeline import load_run_dir, merged_profile

    run, torch_profile, nsys_profile, csv = load_run_dir(PLANTED / name / "run")
    return analyze(merged_profile(run, torch_profile, nsys_profile, csv)[0])


def _predicted_and_realized(name: str, fix: Fix) -> tuple[float, float]:
    graph = _graph(name)
    plain = _plain_ms(name, "plain_script")
    fit = fit_host_scale(graph, plain)
    assert fit.step_ms == pytest.approx(plain, rel=0.03)
    assert fit.lower <= fit.scale <= fit.upper
    fixed = replay_step(apply(host_scaled(graph, fit.scale), fix)).step_time_ms
    return fit.step_ms - fixed, plain - _plain_ms(name, "plain_twin")


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("sync_item_per_microstep", Fix("no_syncs", "loss read once per log interval")),
        ("launch_per_sample_loss", Fix("graph_launch", "one graph launch per step")),
        ("cpu_roundtrip", Fix("less_host_work", "mining on the GPU")),
    ],
)
def test_replayed_fix_predicts_the_twins_saving_within_20_percent(name, fix):
    predicted, realized = _predicted_and_realized(name, fix)
    assert predicted == pytest.approx(realized, rel=0.20)


def test_the_data_loader_finding_picks_its_fix_from_the_measured_fetch_time():
    from hybrid.pipeline import analyze_run_dir
    from hybrid.replay.predict import fix_for, run_fix_inputs

    results = analyze_run_dir(PLANTED / "data_loader_workers0" / "run")
    replayed = next(f for f in results["diagnosis"]["bottlenecks"] if f["id"] == "data.loader_stall")
    assert replayed["time_lost_method"] == "replay" and "torch pass measured" in replayed["replay"]["basis"]
    analysis = _rules_findings("data_loader_workers0")
    stall = next(f for f in analysis.diagnosis.findings if f.id == "data.loader_stall")
    torch_ms = results["metrics"]["torch_pass_step_time_ms"]["value"]
    graph = _graph("data_loader_workers0")
    torch_to_nsys = results["timing"]["replay_step_time_ms"] / torch_ms
    fix = fix_for(stall, run_fix_inputs(analysis.analyzed, graph, torch_to_nsys=torch_to_nsys))
    predicted, realized = _predicted_and_realized("data_loader_workers0", fix)
    assert predicted == pytest.approx(realized, rel=0.20)


def test_pinned_copies_replay_the_pageable_plant():
    # nsys slowed this capture's 100 MB pageable copies (17.9 ms a step under nsys, 13.4 plain), so no
    # host scale reaches the plain step: the saving is read on the profiled step, as its share.
    graph = _graph("data_pageable_h2d")
    base = replay_step(graph).step_time_ms
    fixed = replay_step(apply(graph, Fix("pinned_copies", "pinned", {"bytes_per_s": 51.2e9}))).step_time_ms
    plain, twin = _plain_ms("data_pageable_h2d", "plain_script"), _plain_ms("data_pageable_h2d", "plain_twin")
    assert (base - fixed) * plain / base == pytest.approx(plain - twin, rel=0.20)


def test_a_fix_returns_a_new_graph_and_leaves_its_input_alone():
    graph = _graph("sync_item_per_microstep")
    before = replay_step(graph).step_ns.copy()
    waits = graph.h_wait.copy()
    fixed = apply(graph, Fix("no_syncs", ""))
    assert (graph.h_wait == waits).all() and (fixed.h_wait != waits).any()
    assert np.array_equal(replay_step(graph).step_ns, before)


def test_no_syncs_keeps_the_step_hooks_final_sync_and_one_read_every_n_steps():
    graph = _graph("sync_item_per_microstep")
    base = replay_step(graph)
    every_step = apply(graph, Fix("no_syncs", ""))
    some = apply(graph, Fix("no_syncs", "", {"keep_every": 2}))
    waits = lambda g: int((g.h_wait != 0).sum())
    assert waits(every_step) < waits(some) < waits(graph)
    # The device still finishes every step's work before the last step closes.
    fixed = replay_step(every_step)
    assert fixed.h_start[graph.step_end_event[-1]] >= fixed.d_end.max() - 1e3
    assert fixed.step_time_ms < replay_step(some).step_time_ms < base.step_time_ms


def test_faster_gemms_shrink_only_fp32_gemm_kernels_and_a_device_bound_step_follows():
    graph = _graph("tc_fp32_no_tf32")
    fixed = apply(graph, Fix("faster_gemms", "tf32", {"speedup": 2.0, "precisions": ("fp32",)}))
    changed = fixed.d_dur != graph.d_dur
    assert changed.any() and np.allclose(fixed.d_dur[changed], graph.d_dur[changed] / 2)
    assert all(
        "gemm" in n.lower() or "sgemm" in n.lower() or "cutlass" in n.lower() for n in graph.d_name[changed]
    )
    gemm_ms = graph.d_dur[changed].sum() / len(graph.step_ids) / 1e6
    saved = replay_step(graph).step_time_ms - replay_step(fixed).step_time_ms
    # The host queues the whole step ahead of the device: nearly all GEMM time saved is step time.
    assert saved == pytest.approx(gemm_ms / 2, rel=0.05)


def test_fused_chains_lose_their_extra_kernels_and_launch_gaps():
    graph = _graph("roofline_unfused_gelu")
    fixed = apply(graph, Fix("fused_kernels", ""))
    assert (fixed.d_dur == 0).sum() > 0 and fixed.d_dur.sum() < graph.d_dur.sum()
    saved = replay_step(graph).step_time_ms - replay_step(fixed).step_time_ms
    realized = _plain_ms("roofline_unfused_gelu", "plain_script") - _plain_ms(
        "roofline_unfused_gelu", "plain_twin"
    )
    assert saved == pytest.approx(realized, rel=0.20)


def test_overlapped_collectives_never_slow_the_step_and_it_still_waits_for_them():
    graph = build_graph(load_nsys_export(JOBS / "h200-ddp-healthy" / "rank-00" / "nsys" / "profile.sqlite"))
    fixed = apply(graph, Fix("overlapped_communication", ""))
    base, replay = replay_step(graph), replay_step(fixed)
    assert replay.step_time_ms <= base.step_time_ms + 1e-9
    assert replay.h_start[graph.step_end_event[-1]] >= replay.d_end.max() - 1e3


def test_unknown_fix_kind_is_refused():
    with pytest.raises(ValueError, match="unknown fix kind"):
        apply(_graph("occ_few_row_softmax"), Fix("teleport", ""))


def test_a_device_bound_multi_stream_step_passes_a_gemm_speedup_on():
    # resnet50 b32 fp32 (4 streams, cuDNN's side streams): the device bounds the step, so shorter
    # GEMM/conv kernels shorten it; ops held back by waits the export does not name must follow
    # their predecessors, not stay pinned to their measured start.
    graph = build_graph(
        load_nsys_export(
            Path(__file__).parent / "fixtures" / "runs" / "h200-resnet50" / "nsys" / "profile.sqlite"
        )
    )
    fixed = apply(graph, Fix("faster_gemms", "", {"speedup": 2.0, "precisions": ("fp32",)}))
    halved_ms = (graph.d_dur - fixed.d_dur).sum() / len(graph.step_ids) / 1e6
    base = replay_step(graph).step_time_ms
    saved = base - replay_step(fixed).step_time_ms
    # The host's own pace (every kernel instant) is the floor the faster device runs into.
    host_floor = replay_step(
        apply(graph, Fix("faster_kernels", "", {"saved_ns_per_step": 1e12}))
    ).step_time_ms
    assert halved_ms > 10 and host_floor < base - 5
    assert saved == pytest.approx(min(halved_ms, base - host_floor), rel=0.15)


@pytest.mark.parametrize(
    "name", ["cpu_numpy_augment", "graph_breaks", "healthy_pipelined_input", "tc_fp16_unaligned"]
)
def test_every_finding_gets_a_fix_or_a_reason_and_no_fix_slows_the_step(name):
    from hybrid.replay.predict import fix_for, run_fix_inputs
    from hybrid.rules.base import NoFix

    analysis = _rules_findings(name)
    graph = _graph(name)
    base = replay_step(graph).step_time_ms
    run_inputs = run_fix_inputs(analysis.analyzed, graph)
    for finding in analysis.diagnosis.findings:
        fix = fix_for(finding, run_inputs)
        if isinstance(fix, NoFix):
            assert fix.reason, finding.id
        else:
            assert fix.basis
            assert replay_step(apply(graph, fix)).step_time_ms <= base * 1.001, finding.id


def test_resnet50_tf32_and_bf16_predictions_from_the_gpus_own_speedups():
    # Calibration and plain passes measured on the H200 in one call
    # (tests/fixtures/runs/h200-resnet50-precision/job.log): the fp32 capture, replayed with the measured
    # conv speedups, against plain TF32 and bf16 runs.
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "evaluate_replay", root / "benchmarks" / "evaluate_replay.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = {
        r["fix"]: r
        for r in module.precision_rows(module.DEFAULT_PRECISION_RUN, module.DEFAULT_PRECISION_DATA)
    }
    assert set(rows) == {"tf32", "bf16-amp"}
    for row in rows.values():
        assert row["speedup"] > 2 and "measured on this GPU (NVIDIA H200" in row["basis"]
        assert row["predicted_ms"] == pytest.approx(row["realized_ms"], rel=0.20)
