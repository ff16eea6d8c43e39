"""The ncu command line, kernel-name filter, finder and post-run checks."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_ncu_pass import probe_kernels

from nsight import ncu
from nsight.errors import ToolFailed
from nsight.ncu_csv import parse_ncu_csv
from nsight.ncu_metrics import METRICS

PROBE = Path(__file__).parent / "fixtures" / "h200-probe"

# What ncu 2025.3 prints when profiling is restricted to admins (from NVIDIA's ERR_NVGPUCTRPERM page).
PERMISSION_TEXT = (
    "==PROF== Connected to process 2231 (/usr/bin/python3.12)\n"
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
    "Counters on the target device 0. For instructions on enabling permissions and to get more "
    "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
)


def test_build_ncu_command_exact_argv():
    names = [
        "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
        "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float>>(T3)",
    ]
    argv = ncu.build_ncu_command(
        Path("/opt/ncu/ncu"),
        Path("/run/ncu/report.ncu-rep"),
        ["python", "-m", "hybrid.inject.script", "--", "train.py"],
        kernel_names=names,
        nvtx_step=0,
        launch_count=40,
    )
    assert argv == [
        "/opt/ncu/ncu",
        "--export",
        "/run/ncu/report.ncu-rep",
        "--force-overwrite",
        "--clock-control",
        "none",
        "--cache-control",
        "all",
        "--target-processes",
        "all",
        "--metrics",
        ",".join(METRICS),
        "--kernel-name-base",
        "function",
        "--kernel-name",
        "regex:^(?!nccl)(?:nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT|reduce_kernel)$",
        "--nvtx",
        "--nvtx-include",
        "hybrid@step 0/",
        "--launch-count",
        "40",
        "python",
        "-m",
        "hybrid.inject.script",
        "--",
        "train.py",
    ]


def test_report_is_read_back_as_the_raw_csv_page_in_base_units():
    assert ncu.build_import_command(Path("/opt/ncu/ncu"), Path("/run/ncu/report.ncu-rep")) == [
        "/opt/ncu/ncu",
        "--import",
        "/run/ncu/report.ncu-rep",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
    ]


# ncu's per-launch lines as 2025.x prints them (number, truncated name) and as older releases did.
PROFILING_LINES = [
    '==PROF== Profiling "vectorized_elementwise_kernel" - 0: 0%....50%....100% - 9 passes',
    '==PROF== Profiling "sm80_xmma_fprop_implicit_gemm_f3..." - 41: 0%....50%....100% - 9 passes',
    '==PROF== Profiling "add_kernel": 0%....50%....100% - 18 passes',
]


def test_profiling_lines_name_the_replayed_kernel_and_nothing_else_does():
    assert [ncu.profiled_kernel(line) for line in PROFILING_LINES] == [
        "vectorized_elementwise_kernel",
        "sm80_xmma_fprop_implicit_gemm_f3...",
        "add_kernel",
    ]
    for other in (
        "==PROF== Connected to process 7659 (/usr/bin/python3.12)",
        "[hybrid] ncu step 1/1",
        'print("==PROF== Profiling "x"")',
        "==PROF== Report: /run/ncu/report.ncu-rep",
    ):
        assert ncu.profiled_kernel(other) is None


def test_finish_pass_without_a_report_says_ncu_wrote_none_and_keeps_the_log(tmp_path):
    console = "==PROF== Connected to process 1\n==ERROR== The application returned an error code (1).\n"
    with pytest.raises(ToolFailed, match="wrote no counter table") as failed:
        ncu.finish_pass(
            Path("/nonexistent/ncu"),
            tmp_path / "report.ncu-rep",
            tmp_path / "counters.csv",
            tmp_path / "ncu.log",
            1,
            console,
        )
    assert "ncu wrote no report" in str(failed.value)
    assert "The application returned an error code" in (tmp_path / "ncu.log").read_text()


def test_measured_window_is_the_profiler_api_range_not_a_thread_bound_nvtx_filter():
    argv = ncu.build_ncu_command(
        Path("ncu"),
        Path("c.csv"),
        ["app"],
        kernel_names=["reduce_kernel"],
        measured_window=True,
        one_per_config=True,
    )
    # cudaProfilerStart/Stop (called by the injector) bound the window for every thread, so the
    # backward kernels that PyTorch's autograd thread launches are inside it.
    assert argv[argv.index("--kernel-name") + 2 :] == [
        "--profile-from-start",
        "off",
        "--filter-mode",
        "per-launch-config",
        "--launch-count",
        "1",
        "app",
    ]
    assert "--nvtx" not in argv and "--nvtx-include" not in argv
    with pytest.raises(ValueError, match="exclusive"):
        ncu.build_ncu_command(
            Path("ncu"), Path("c.csv"), ["app"], kernel_names=[], measured_window=True, nvtx_step=0
        )


def test_whole_run_has_no_nvtx_filter_and_no_names_means_all_but_nccl():
    argv = ncu.build_ncu_command(
        Path("ncu"), Path("c.csv"), ["app"], kernel_names=[], nvtx_step=None, launch_count=None
    )
    assert "--nvtx" not in argv and "--launch-count" not in argv and "--profile-from-start" not in argv
    assert argv[argv.index("--kernel-name") + 1] == "regex:^(?!nccl).*"
    assert argv[-1] == "app"


def test_nsys_and_ncu_names_reduce_to_the_same_function_names():
    # The same five kernels, demangled by nsys and by ncu (which differ: at::native::...<(int)4>
    # vs at::...<4>), must give the same base names, since that is what the ncu filter matches.
    nsys_bases = {ncu.function_base_name(n) for n in probe_kernels()["name"]}
    ncu_bases = {
        ncu.function_base_name(n) for n in parse_ncu_csv(PROBE / "ncu_metrics_stdout.csv").frame["name"]
    }
    assert (
        nsys_bases
        == ncu_bases
        == {
            "distribution_elementwise_grid_stride_kernel",
            "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
            "vectorized_elementwise_kernel",
            "reduce_kernel",
        }
    )


def test_nsys_and_ncu_names_reduce_to_one_signature_per_instantiation():
    nsys_names = set(probe_kernels()["name"])
    ncu_names = set(parse_ncu_csv(PROBE / "ncu_metrics_stdout.csv").frame["name"])
    nsys_signatures = {ncu.kernel_signature(n) for n in nsys_names}
    assert len(nsys_signatures) == len(nsys_names)  # instantiations stay apart
    assert {ncu.kernel_signature(n) for n in ncu_names} <= nsys_signatures
    # The two spellings of one instantiation as the H200 tools printed them (resnet50 capture).
    assert ncu.kernel_signature(
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
        "std::array<char *, (unsigned long)3>>(int, T2, T3)"
    ) == ncu.kernel_signature(
        "void at::vectorized_elementwise_kernel<4, at::CUDAFunctor_add<float>, "
        "std::array<char *, 3>>(int, T2, T3)"
    )
    assert ncu.kernel_signature("void f<(bool)1>(int)") != ncu.kernel_signature("void f<0>(int)")


def test_kernel_filter_matches_selected_functions_only():
    names = list(probe_kernels()["name"])
    gemm_and_reduce = [n for n in names if "nvjet" in n or "reduce_kernel" in n]
    pattern = ncu.kernel_name_filter(gemm_and_reduce).removeprefix("regex:")
    # Python's re reads this ECMAScript subset (lookahead, groups, alternation) the same way; ncu
    # matches the whole name (seen on the H200: a bare `^(?!nccl)` matched no kernel), hence fullmatch.
    matched = {ncu.function_base_name(n) for n in names if re.fullmatch(pattern, ncu.function_base_name(n))}
    assert matched == {"nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "reduce_kernel"}
    assert not re.fullmatch(pattern, "reduce_kernel_v2")  # anchored: no prefix matches
    everything_but_nccl = ncu.kernel_name_filter([]).removeprefix("regex:")
    assert re.fullmatch(everything_but_nccl, "reduce_kernel")
    assert not re.fullmatch(everything_but_nccl, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")


def test_function_base_name_strips_templates_namespaces_and_parameters():
    assert (
        ncu.function_base_name("void (anonymous namespace)::softmax_warp_forward<float, 10>(float *, int)")
        == "softmax_warp_forward"
    )
    assert ncu.function_base_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
    assert (
        ncu.function_base_name("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm>(T1::Params)")
        == "Kernel2"
    )


def test_metric_characters_need_escaping_in_the_filter():
    pattern = ncu.kernel_name_filter(["odd.name+x"]).removeprefix("regex:")
    assert re.fullmatch(pattern, "odd.name+x") and not re.fullmatch(pattern, "oddXname+x")


def test_permission_error_is_detected_with_the_fixes():
    error = ncu.check_counter_permission(PERMISSION_TEXT)
    assert isinstance(error, ToolFailed)
    assert "ERR_NVGPUCTRPERM" in error.cause
    for fix in ("root", "NVreg_RestrictProfilingToAdminUsers=0", "--cap-add SYS_ADMIN"):
        assert fix in error.fix
    assert ncu.check_counter_permission((PROBE / "ncu_metrics_stdout.csv").read_text()) is None


def test_check_run_raises_on_permission_and_keeps_files(tmp_path):
    csv_path, log_path = tmp_path / "counters.csv", tmp_path / "ncu.log"
    csv_path.write_text(PERMISSION_TEXT)
    with pytest.raises(ToolFailed, match="may not read GPU performance counters") as info:
        ncu.check_run(csv_path, log_path, 1)
    assert str(csv_path) in info.value.kept
    assert "ERR_NVGPUCTRPERM" in log_path.read_text()


def test_check_run_on_real_capture_splits_messages_and_flags_partial(tmp_path):
    csv_path, log_path = tmp_path / "counters.csv", tmp_path / "ncu.log"
    original = (PROBE / "ncu_metrics_stdout.csv").read_text()
    csv_path.write_text(original)
    assert ncu.check_run(csv_path, log_path, 0, console="done 67133744.0\n") is False
    log = log_path.read_text()
    assert "==PROF== Disconnected from process 943" in log and "done 67133744.0" in log
    assert csv_path.read_text() == original  # the artifact is never rewritten
    assert ncu.check_run(csv_path, log_path, 137) is True  # a table, but ncu stopped early


def test_check_run_without_table_says_so(tmp_path):
    csv_path = tmp_path / "counters.csv"
    csv_path.write_text("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n")
    with pytest.raises(ToolFailed, match="no counter table") as info:
        ncu.check_run(csv_path, tmp_path / "ncu.log", 0)
    assert "No kernels were profiled" in info.value.cause
    with pytest.raises(ToolFailed):
        ncu.check_run(tmp_path / "never-written.csv", tmp_path / "ncu.log", 1)


def test_version_parsing():
    text = (
        "NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
        "Version 2025.3.1.0 (build 36398880) (public-release)\n"
    )
    assert ncu.parse_ncu_version(text) == "2025.3.1.0"
    assert ncu.parse_ncu_version("command not found") is None


def test_find_ncu_honours_env_file_and_folder(tmp_path, monkeypatch):
    binary = tmp_path / "ncu"
    binary.write_text("#!/bin/sh\necho 'Version 2025.3.1.0 (build 1)'\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(ncu.NCU_ENV, str(binary))
    assert ncu.find_ncu() == binary
    monkeypatch.setenv(ncu.NCU_ENV, str(tmp_path))
    assert ncu.find_ncu() == binary
    assert ncu.ncu_version(binary) == "2025.3.1.0"
    monkeypatch.setenv(ncu.NCU_ENV, str(tmp_path / "missing"))
    assert ncu.find_ncu() is None


WORKLOAD = """
import torch, nvtx
x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
for i in range(2):
    with nvtx.annotate(f"step {i}", domain="hybrid"):
        y = x @ x
        z = y * 2
torch.cuda.synchronize()
"""


@pytest.mark.gpu
def test_real_ncu_run_profiles_the_step_and_the_gemm(tmp_path):
    found = ncu.find_ncu()
    if found is None:
        pytest.skip("ncu not installed")
    script = tmp_path / "work.py"
    script.write_text(WORKLOAD)
    names = ["nvjet_placeholder_not_matching", "void at::native::vectorized_elementwise_kernel<4>(int)"]
    run = ncu.run_ncu(
        found,
        tmp_path / "counters.csv",
        tmp_path / "ncu.log",
        [sys.executable, str(script)],
        kernel_names=names,
        nvtx_step=1,
        env=dict(os.environ),
        timeout_s=300,
    )
    parsed = parse_ncu_csv(run.csv_path)
    # Only the multiply of step 1 matches the filter (the GEMM name does not; randn is outside steps).
    assert len(parsed.frame) == 1
    assert ncu.function_base_name(parsed.frame["name"].item()) == "vectorized_elementwise_kernel"
    # The bf16 input is read from DRAM once; the output's writes may still sit in the 60 MB L2 when the
    # kernel ends (seen on the H200: 8.4 MB read, ~0 written), so they are bounded, not equated.
    tensor_bytes = 2 * 2048 * 2048
    assert parsed.frame["dram_read_bytes"].item() == pytest.approx(tensor_bytes, rel=0.1)
    assert parsed.frame["dram_write_bytes"].item() <= 1.1 * tensor_bytes
    assert parsed.replay_passes is not None and parsed.replay_passes >= 1
    assert subprocess.run([str(found), "--version"], check=False, capture_output=True).returncode == 0


# Forward on the Python thread, backward on PyTorch's autograd thread; max pooling's backward kernel
# runs only in the backward pass. The profiler API range is what the injector opens after warmup.
BACKWARD_WORKLOAD = """
import torch, nvtx
x = torch.randn(32, 64, 56, 56, device="cuda", requires_grad=True)
torch.nn.functional.max_pool2d(x, 2).sum().backward()
torch.cuda.synchronize()
torch.cuda.profiler.start()
with nvtx.annotate("step 0", domain="hybrid"):
    torch.nn.functional.max_pool2d(x, 2).sum().backward()
    torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


@pytest.mark.gpu
def test_real_ncu_run_sees_backward_kernels_only_in_the_measured_window(tmp_path):
    found = ncu.find_ncu()
    if found is None:
        pytest.skip("ncu not installed")
    script = tmp_path / "backward.py"
    script.write_text(BACKWARD_WORKLOAD)
    names = ["max_pool_forward_nchw", "max_pool_backward_nchw"]

    def profiled(**window) -> set[str]:
        out = tmp_path / "_".join(window)
        run = ncu.run_ncu(
            found,
            out / "counters.csv",
            out / "ncu.log",
            [sys.executable, str(script)],
            kernel_names=names,
            env=dict(os.environ),
            timeout_s=300,
            **window,
        )
        return {ncu.function_base_name(n) for n in parse_ncu_csv(run.csv_path).frame["name"]}

    assert profiled(measured_window=True) == set(names)
    # The push/pop range belongs to the Python thread: the autograd thread's launch is outside it.
    assert profiled(nvtx_step=0) == {"max_pool_forward_nchw"}
