"""The injector on a CUDA GPU: the torch pass trace of tests/scripts/cuda_steps.py (one fp16 NxN
matmul, one `.item()` and one `.cpu()` of the result per step) loads with its steps, kernels,
copies and syncs where they belong; under nsys, the NVTX step and module ranges the injector emits
are what the nsys loader finds. Run on the GPU machine: `python -m pytest -m gpu tests/test_inject_gpu.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.inject.stepping import INJECT_FILE, TRACE_FILE
from hybrid.load.torch_trace import load_torch_trace

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "scripts" / "cuda_steps.py"
SIZE = 2048
WARMUP, STEPS = 2, 4
TIMEOUT_S = 300


def _inject_argv(out: Path, pass_name: str, iterations: int, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hybrid.inject.script",
        "--pass",
        pass_name,
        "--out",
        str(out),
        "--warmup",
        str(WARMUP),
        "--steps",
        str(STEPS),
        *flags,
        "--",
        str(SCRIPT),
        str(iterations),
        str(SIZE),
    ]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    return subprocess.run(
        argv, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("cuda_torch")
    proc = _run(_inject_argv(base / "torch", "torch", 50), base)
    assert proc.returncode == 0, proc.stderr[-3000:]
    inject = json.loads((base / "torch" / INJECT_FILE).read_text())
    return inject, load_torch_trace(base / "torch" / TRACE_FILE)


def test_inject_reports_the_cuda_device_and_memory(torch_run):
    inject, profile = torch_run
    assert inject["outcome"] == "step_limit" and inject["measured_steps"] == STEPS
    assert inject["cuda_available"] is True
    assert inject["device_name"] == profile.device.name
    assert inject["peak_memory_bytes"] >= 2 * SIZE * SIZE * 2  # x and the result y, fp16
    assert inject["memory_capacity_bytes"] > inject["peak_memory_bytes"]
    assert inject["window_ns"] == inject["step_end_ns"][-1] > 0
    assert profile.device.sm_count > 0 and profile.device.compute_capability


def test_device_work_belongs_to_the_steps_that_launched_it(torch_run):
    _, profile = torch_run
    assert list(profile.steps["step"]) == list(range(STEPS))
    kernels = profile.kernels
    assert (kernels["step"] >= 0).all()  # the window holds measured steps only
    per_step = kernels.groupby("step").size()
    assert per_step.nunique() == 1 and per_step.iloc[0] >= 2
    assert (kernels["launch_ns"] >= 0).all()
    assert profile.launches.groupby("step").size().equals(per_step)


def test_copies_and_syncs_per_step(torch_run):
    _, profile = torch_run
    memcpys = profile.memcpys
    pageable = memcpys[memcpys["host_pinned"] == False]
    pinned = memcpys[memcpys["host_pinned"] == True]
    assert pageable.groupby("step")["bytes"].sum().to_dict() == {s: SIZE * SIZE * 2 for s in range(STEPS)}
    assert pinned.groupby("step")["bytes"].sum().to_dict() == {s: 4 for s in range(STEPS)}  # float32 .item()
    syncs = profile.syncs
    assert syncs[syncs["kind"] == "memcpy"].groupby("step").size().to_dict() == {s: 1 for s in range(STEPS)}
    assert set(syncs[syncs["kind"] == "stream"]["step"]) == set(range(STEPS))


def test_matmul_op_carries_its_gemm_time_and_flops(torch_run):
    _, profile = torch_run
    mm = profile.ops[profile.ops["name"] == "aten::mm"]
    assert mm.groupby("step").size().to_dict() == {s: 1 for s in range(STEPS)}
    assert (mm["device_ns"] > 0).all()
    assert (mm["flops"] == 2 * SIZE**3).all()


def test_nsys_sees_the_step_and_module_ranges(tmp_path):
    from hybrid.load.nsys_export import load_nsys_export
    from nsight import nsys

    nsys_path = nsys.find_nsys()
    if nsys_path is None:
        pytest.skip("nsys is not installed on this machine")
    out_base = tmp_path / "nsys" / "profile"
    argv = nsys.build_nsys_command(
        nsys_path, out_base, _inject_argv(tmp_path / "nsys", "nsys", 50, "--nvtx-modules"), capture_range=True
    )
    proc = _run(argv, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    inject = json.loads((tmp_path / "nsys" / INJECT_FILE).read_text())
    assert inject["nvtx_domains"] is True and inject["measured_steps"] == STEPS
    profile = load_nsys_export(Path(f"{out_base}.sqlite"))
    assert profile.step_source == "nvtx:hybrid"
    assert list(profile.steps["step"]) == list(range(STEPS))
    # capture starts at the end of warmup: no warmup kernel, the same kernels in every step
    assert (profile.kernels["step"] >= 0).all()
    assert profile.kernels.groupby("step").size().nunique() == 1
    # the root module's range carries its class name, and the GEMM was launched inside it
    assert set(profile.layers["name"]) == {"Square"}
    assert (profile.kernels["layer"] == "Square").sum() >= STEPS


def test_nsys_pass_of_a_script_shorter_than_the_window(tmp_path):
    """The script stops after 1 of 4 measured steps: inject.json names the cut-short step, whose NVTX
    range covers the script's tail (the nsys loader is expected to drop it)."""
    from nsight import nsys

    nsys_path = nsys.find_nsys()
    if nsys_path is None:
        pytest.skip("nsys is not installed on this machine")
    out_base = tmp_path / "nsys" / "profile"
    argv = nsys.build_nsys_command(
        nsys_path, out_base, _inject_argv(tmp_path / "nsys", "nsys", WARMUP + 1), capture_range=True
    )
    proc = _run(argv, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    inject = json.loads((tmp_path / "nsys" / INJECT_FILE).read_text())
    assert inject["outcome"] == "completed" and inject["measured_steps"] == 1
    assert inject["cut_short_step"] == 1
    assert Path(f"{out_base}.sqlite").is_file()
