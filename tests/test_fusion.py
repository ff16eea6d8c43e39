"""What torch.compile fuses (hybrid.analysis.fusion), on the kernel names of the committed captures and on
their timelines: which kernels may join a run, what a run saves, and what the fusion finding claims."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from reviewed_kernels import reviewed_kernels

from hybrid.analysis.fusion import fused_run_ns, fusible_mask, fusion_runs
from hybrid.analysis.kernel_classes import MATMUL_KINDS, kernel_kind
from hybrid.load.nsys_export import load_nsys_export
from hybrid.pipeline import analyze_run_dir
from hybrid.replay.graph import build_graph
from hybrid.replay.simulate import replay_step
from hybrid.replay.transforms import apply
from hybrid.rules.base import SEVERITY_RANK, Fix

FIXTURES = Path(__file__).parent / "fixtures"
RESNET50 = FIXTURES / "runs" / "h200-resnet50"  # fp32, batch 32: 9.4 ms of its kernels a step are in runs


def test_the_kernels_inductor_generates_may_fuse_and_library_calls_may_not():
    names = pd.Series(list(reviewed_kernels()))
    fusible = pd.Series(fusible_mask(names), index=names)
    kinds = names.map(kernel_kind)
    # GEMMs, convolutions, attention and collectives stay library calls.
    assert not fusible[kinds.isin([*MATMUL_KINDS, "communication", "gemv"]).to_numpy()].any()
    for part in ("bn_fw_tr_1C11", "bn_bw_1C11", "nchwToNhwcKernel", "nhwcToNchwKernel", "max_pool_forward"):
        chosen = names[names.str.contains(part)]
        assert len(chosen) and fusible[chosen].all(), part
    # The parts of a library call that only finish it: split-K reductions, cuDNN's weight-gradient
    # reduction, its padding and filter flips; and CUB's device-wide primitives, which nonzero, unique,
    # sort and top-k run (the torchvision detector's select, scan and single-tile reduce kernels).
    for part in (
        "splitKreduce",
        "reduce_wgrad",
        "nhwcAddPadding",
        "flip_filter",
        "DeviceSelectSweepKernel",
        "DeviceCompactInitKernel",
        "DeviceReduceSingleTileKernel",
        "DeviceRadixSort",
    ):
        chosen = names[names.str.contains(part)]
        assert len(chosen) and not fusible[chosen].any(), part


def test_runs_are_back_to_back_fusible_kernels_of_one_stream_and_step():
    fusible = np.array([True, True, False, True, True, True, True, True, False, True])
    stream = np.array([7, 7, 7, 7, 7, 8, 8, 8, 8, 8])
    step = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    positions, starts = fusion_runs(fusible, stream, step)
    # A GEMM ends the first run; the kernels at 3 and 4 are in different steps, 4 and 5 on different
    # streams, and 9 runs alone: none of those is a run.
    assert positions.tolist() == [0, 1, 5, 6, 7] and starts.tolist() == [0, 2]
    durations = np.array([5.0, 3.0, 1.0, 4.0, 2.0])
    assert fused_run_ns(durations, starts).tolist() == [5.0, 4.0]
    assert fused_run_ns(durations[:0], starts[:0]).size == 0


@pytest.fixture(scope="module")
def resnet50() -> dict:
    return analyze_run_dir(RESNET50)


def test_resnet50s_batch_norms_are_what_a_compile_fuses(resnet50):
    metrics = resnet50["metrics"]
    # The cuDNN batch norms hold the largest share of the runs; the elementwise ReLUs and adds come next.
    assert metrics["fusible_chain_kinds"]["value"].startswith("normalization ")
    # Batch norms, elementwise kernels and layout copies: the kinds two settled --verify readings measured.
    assert metrics["fusible_chain_measured_pct"]["value"] >= 95
    assert "normalization" not in metrics["fusible_chain_unmeasured_kinds"]["value"]
    # A fused run keeps its longest kernel, so it saves less than the runs take.
    assert 0 < metrics["fusible_saving_ms"]["value"] < metrics["fusible_chain_ms"]["value"]


def _premises(results: dict) -> tuple[dict, list[str]]:
    fusion = next(f for f in results["diagnosis"]["bottlenecks"] if f["id"] == "compile.fusible_elementwise")
    return fusion, [e["value"] for e in fusion["evidence"] if e["label"] == "time lost assumes"]


def test_the_fusion_premise_is_stated_only_for_kinds_no_verified_run_measured(resnet50):
    # resnet50's runs (batch norms, ReLUs, adds, layout copies; 4% pooling): the compile realized 12.8 and
    # 12.4 ms on two H100s against 10.3 and 11.4 ms replayed (benchmarks/results/s25_h100): no premise.
    fusion, assumes = _premises(resnet50)
    assert not assumes
    assert fusion["time_lost_ms"] <= resnet50["metrics"]["fusible_chain_ms"]["value"] + 1e-9
    # Runs of elementwise kernels alone were measured too (roofline_unfused_gelu).
    assert not _premises(analyze_run_dir(FIXTURES / "planted" / "roofline_unfused_gelu" / "run"))[1]
    # Conv blocks with max-pool: 38% of the runs' time in pooling, whose fusion no verified run measured.
    pooled_run = analyze_run_dir(FIXTURES / "planted" / "healthy_pipelined_input" / "run")
    pooled, assumes = _premises(pooled_run)
    assert len(assumes) == 1 and "is in pooling kernels" in assumes[0]
    assert pooled_run["metrics"]["fusible_chain_unmeasured_kinds"]["value"] == "pooling"
    assert SEVERITY_RANK[pooled["severity"]] <= SEVERITY_RANK["MODERATE"]


def test_the_fusion_with_its_launches_saves_at_least_the_device_side_alone():
    graph = build_graph(load_nsys_export(RESNET50 / "nsys" / "profile.sqlite"))
    base = replay_step(graph).step_time_ms
    device = base - replay_step(apply(graph, Fix("fused_kernels", "", {"host_launches": 0.0}))).step_time_ms
    whole = base - replay_step(apply(graph, Fix("fused_kernels", ""))).step_time_ms
    assert 0 < device <= whole + 1e-9
