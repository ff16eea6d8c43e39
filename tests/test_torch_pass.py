"""load_torch_trace on the real H200 capture (three fp16 4096x4096 matmuls, each followed by `.item()`
and a copy of the 4096x4096 fp16 result to pageable host memory), on CPU traces written by the
injector's own session, and on bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from hybrid.errors import InputError
from hybrid.inject.stepping import OP_FLOPS_FILE, TRACE_FILE, SessionConfig, StepSession
from hybrid.load.torch_trace import load_torch_trace
from hybrid.profile import FRAME_COLUMNS
from hybrid.provenance import MEASURED_TORCH

FIXTURE = Path(__file__).parent / "fixtures" / "h200-probe" / "torch_trace.json"
MATMULS = 3
RESULT_BYTES = 4096 * 4096 * 2  # one fp16 4096x4096 matrix
ITEM_BYTES = 2  # one fp16 scalar


@pytest.fixture(scope="module")
def probe():
    return load_torch_trace(FIXTURE)


@pytest.fixture(scope="module")
def raw_events():
    return json.loads(FIXTURE.read_text())["traceEvents"]


def test_frames_keep_their_contract_and_provenance(probe):
    probe.validate()
    for name, columns in FRAME_COLUMNS.items():
        assert list(getattr(probe, name).columns) == list(columns), name
    assert set(probe.sources.values()) == {MEASURED_TORCH}
    assert {"kernels", "memcpys", "syncs", "ops", "steps"} <= set(probe.sources)


def test_kernels_gemm_and_reduce_with_launch_config(probe, raw_events):
    names = probe.kernels["name"]
    gemm = probe.kernels[names.str.startswith("nvjet")]
    assert len(gemm) == MATMULS
    assert (names.str.contains("reduce_kernel")).sum() == MATMULS  # one .sum() per iteration
    assert len(probe.kernels) == sum(e.get("cat") == "kernel" for e in raw_events)
    # nvjet's launch config as the trace reports it for each GEMM
    assert set(zip(gemm.grid_x, gemm.grid_y, gemm.grid_z, strict=False)) == {(2, 66, 1)}
    assert set(zip(gemm.block_x, gemm.block_y, gemm.block_z, strict=False)) == {(384, 1, 1)}
    assert set(gemm["registers"]) == {168}
    assert (gemm["shared_bytes"] > 48 * 1024).all()  # opt-in shared memory beyond the 48 KiB default


def test_each_kernel_has_its_launch_call(probe):
    kernels, launches = probe.kernels, probe.launches
    assert (kernels["launch_ns"] >= 0).all()
    assert (kernels["launch_ns"] <= kernels["start_ns"]).all()  # launched before it ran
    joined = kernels.merge(launches, on="correlation", suffixes=("", "_api"))
    assert len(joined) == len(kernels)
    assert (joined["launch_ns"] == joined["start_ns_api"]).all()
    # cuBLASLt's nvjet goes through the driver API, ATen's reduction through the runtime
    gemm_apis = set(joined[joined["name"].str.startswith("nvjet")]["api"])
    assert gemm_apis == {"cuLaunchKernelEx"}
    assert set(joined[~joined["name"].str.startswith("nvjet")]["api"]) == {"cudaLaunchKernel"}


def test_memcpy_kind_bytes_and_host_memory(probe, raw_events):
    memcpys = probe.memcpys
    assert set(memcpys["kind"]) == {"DtoH"}
    pageable = memcpys[memcpys["host_pinned"] == False]
    pinned = memcpys[memcpys["host_pinned"] == True]
    assert list(pageable["bytes"]) == [RESULT_BYTES] * MATMULS  # .cpu() of the result
    assert list(pinned["bytes"]) == [ITEM_BYTES] * MATMULS  # .item() copies into a pinned staging buffer
    raw_bytes = sum(e["args"]["bytes"] for e in raw_events if e.get("cat") == "gpu_memcpy")
    assert memcpys["bytes"].sum() == raw_bytes
    assert len(probe.memsets) == sum(e.get("cat") == "gpu_memset" for e in raw_events)


def test_syncs_from_item_pageable_copies_and_final_synchronize(probe, raw_events):
    syncs = probe.syncs
    by_kind = syncs["kind"].value_counts().to_dict()
    raw_stream_syncs = sum(e.get("name") == "cudaStreamSynchronize" for e in raw_events)
    # .item() and .cpu() each end with a stream sync; torch.cuda.synchronize() at the end
    assert by_kind == {"stream": raw_stream_syncs, "memcpy": MATMULS, "device": 1}
    assert raw_stream_syncs == 2 * MATMULS
    # A cudaMemcpyAsync into pageable memory blocks the host for the whole copy.
    blocking = syncs[syncs["kind"] == "memcpy"].reset_index(drop=True)
    copies = probe.memcpys[probe.memcpys["host_pinned"] == False].reset_index(drop=True)
    assert set(blocking["api"]) == {"cudaMemcpyAsync"}
    assert (blocking["start_ns"] <= copies["start_ns"]).all()
    assert (blocking["end_ns"] >= copies["end_ns"]).all()


def test_ops_nesting_self_time_and_device_time(probe):
    ops = probe.ops
    top = ops[ops["top_level"]]
    # per iteration: matmul, sum, item, to (the .cpu())
    assert sorted(top["name"].value_counts().to_dict().items()) == sorted(
        {"aten::matmul": MATMULS, "aten::sum": MATMULS, "aten::item": MATMULS, "aten::to": MATMULS}.items()
    )
    # Self times partition the top-level time exactly: every nanosecond is one op's own.
    assert ops["cpu_self_ns"].sum() == (top["end_ns"] - top["start_ns"]).sum()
    # Each kernel is charged once, to the innermost op that launched it.
    kernel_ns = (probe.kernels["end_ns"] - probe.kernels["start_ns"]).sum()
    assert ops["device_ns"].sum() == kernel_ns
    mm = ops[ops["name"] == "aten::mm"]
    gemm = probe.kernels[probe.kernels["name"].str.startswith("nvjet")]
    assert sorted(mm["device_ns"]) == sorted(gemm["end_ns"] - gemm["start_ns"])
    assert (ops[ops["name"] == "aten::matmul"]["device_ns"] == 0).all()  # its child mm launched it
    assert all(shape == [[4096, 4096], [4096, 4096]] for shape in mm["shapes"])
    assert all(dtypes == ["c10::Half", "c10::Half"] for dtypes in mm["dtypes"])


def test_trace_without_step_annotations_is_one_step_with_a_warning(probe):
    assert probe.step_source == "whole-capture"
    assert len(probe.steps) == 1
    assert any("ProfilerStep#N" in w for w in probe.warnings)
    for frame in (probe.kernels, probe.memcpys, probe.syncs, probe.launches, probe.ops):
        assert set(frame["step"]) == {0}
    # FLOPs: torch 2.11 does not write them into the trace, and there is no saved file beside it.
    assert probe.ops["flops"].isna().all()
    assert any("FLOPs" in w for w in probe.warnings)


def test_device_from_device_properties(probe):
    device = probe.device
    properties = json.loads(FIXTURE.read_text())["deviceProperties"][0]
    assert device.memory_bytes == properties["totalGlobalMem"]
    assert device.name == "NVIDIA H200"
    assert device.sm_count == 132
    assert device.compute_capability == "9.0"
    assert device.max_warps_per_sm == 2048 // 32
    assert device.source == MEASURED_TORCH


def test_gzipped_trace_loads_the_same(tmp_path, probe):
    packed = tmp_path / "trace.json.gz"
    packed.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    loaded = load_torch_trace(packed)
    assert loaded.kernels.equals(probe.kernels)
    assert loaded.syncs.equals(probe.syncs)


@pytest.mark.parametrize(
    "content, cause",
    [
        (b"", "not JSON"),
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op"', "not JSON"),  # truncated mid-write
        (b"\xff\xfe garbage", "not JSON"),
        (b'{"schemaVersion": 1}', "no `traceEvents`"),
        (b"[1, 2, 3]", "no `traceEvents`"),
        # A Chrome trace from another tool (XLA/TensorBoard style)
        (
            (
                b'{"traceEvents": [{"ph": "X", "cat": "XLA Ops", "name": "fusion.1", '
                b'"pid": 1, "tid": 1, "ts": 1, "dur": 2}]}'
            ),
            "not one from torch.profiler",
        ),
    ],
)
def test_bad_input_names_file_cause_and_fix(tmp_path, content, cause):
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        load_torch_trace(path)
    assert str(path) in info.value.cause
    assert cause in info.value.cause
    assert "torch.profiler" in info.value.fix


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_torch_trace(tmp_path / "absent.json")


# -- CPU traces written by the injector's session --------------------------------------------------


def _train(iterations: int, *, pass_dir: Path, warmup: int, steps: int) -> dict:
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(16, 32)
    session = StepSession(
        SessionConfig(pass_name="torch", out_dir=pass_dir, warmup_steps=warmup, measured_steps=steps)
    )
    with session:
        for _ in range(iterations):
            optimizer.zero_grad()
            model(data).square().mean().backward()
            optimizer.step()
    return session.finish("completed", 0)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    pass_dir = tmp_path_factory.mktemp("torch")
    inject = _train(50, pass_dir=pass_dir, warmup=2, steps=4)
    return inject, load_torch_trace(pass_dir / TRACE_FILE)


def test_cpu_trace_steps_follow_the_session(cpu_run):
    inject, profile = cpu_run
    assert inject["outcome"] == "step_limit" and inject["measured_steps"] == 4
    assert profile.step_source == "torch:annotation"
    assert list(profile.steps["step"]) == [0, 1, 2, 3]
    assert list(profile.steps["name"]) == [f"ProfilerStep#{i}" for i in range(4)]
    assert profile.kernels.empty and profile.memcpys.empty and profile.syncs.empty
    assert profile.device.name is None and profile.device.source == "none"
    assert not profile.warnings


def test_cpu_trace_ops_split_evenly_across_steps(cpu_run):
    _, profile = cpu_run
    ops = profile.ops
    assert set(ops["step"]) <= {-1, 0, 1, 2, 3}
    # each step ran the same training step: two Linear forwards (addmm) per step
    addmm_per_step = ops[ops["name"] == "aten::addmm"].groupby("step").size()
    assert addmm_per_step.to_dict() == {0: 2, 1: 2, 2: 2, 3: 2}
    per_step = ops[ops["step"] >= 0].groupby("step").size()
    assert per_step.nunique() == 1


def test_cpu_trace_flops_come_from_the_saved_file_and_match_shapes(cpu_run):
    _, profile = cpu_run
    addmm = profile.ops[profile.ops["name"] == "aten::addmm"]
    assert len(addmm) == 8
    for shapes, flops in zip(addmm["shapes"], addmm["flops"], strict=False):
        (_bias, (m, k), (_k, n), *_scalars) = shapes
        assert flops == 2 * m * k * n


def test_unfinished_step_is_dropped(tmp_path):
    """The script ends after 1 warmup + 3 of 5 measured steps: step 3 was open when it ended."""
    inject = _train(4, pass_dir=tmp_path, warmup=1, steps=5)
    assert inject["outcome"] == "completed" and inject["measured_steps"] == 3
    profile = load_torch_trace(tmp_path / TRACE_FILE)
    assert list(profile.steps["step"]) == [0, 1, 2]
    assert any("still open" in w for w in profile.warnings)


def test_flops_file_is_optional(tmp_path):
    _train(6, pass_dir=tmp_path, warmup=1, steps=2)
    (tmp_path / OP_FLOPS_FILE).unlink()
    bare = load_torch_trace(tmp_path / TRACE_FILE)
    assert len(bare.steps) == 2
    assert bare.ops["flops"].isna().all()
    assert any("FLOPs" in w for w in bare.warnings)
