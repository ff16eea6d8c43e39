"""Finding nsys, its command line, version gate and failure messages; a real nsys pass on the GPU."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from nsight import nsys
from nsight.errors import ToolFailed

ROOT = Path(__file__).resolve().parents[1]


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_command_with_capture_range():
    argv = nsys.build_nsys_command(
        Path("/opt/nsys"), Path("/run/nsys/profile"), ["python", "train.py", "--lr", "1"], capture_range=True
    )
    assert argv == [
        "/opt/nsys",
        "profile",
        "-t",
        "cuda,nvtx",
        "-s",
        "none",
        "--cpuctxsw=none",
        "--cuda-graph-trace=node",
        "--export",
        "sqlite",
        "-o",
        "/run/nsys/profile",
        "--force-overwrite",
        "true",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "python",
        "train.py",
        "--lr",
        "1",
    ]


def test_command_for_the_whole_run():
    argv = nsys.build_nsys_command(Path("nsys"), Path("out"), ["python", "x.py"], capture_range=False)
    assert not any(a.startswith(("--capture-range", "--osrt")) for a in argv)
    assert argv[argv.index("-t") + 1] == "cuda,nvtx" and argv[-2:] == ["python", "x.py"]


def test_version_parsing_and_gate():
    assert nsys.parse_nsys_version("NVIDIA Nsight Systems version 2025.3.1.90-253135822842v0") == (
        2025,
        3,
        1,
        90,
    )
    assert nsys.parse_nsys_version("no digits here") is None
    nsys.check_nsys_version("2025.3.1.90")
    with pytest.raises(ToolFailed, match="nsys 2022.4.2 is too old: hybrid needs 2023.1") as info:
        nsys.check_nsys_version("2022.4.2")
    assert "HYBRID_NSYS" in info.value.fix


def test_find_nsys_honours_the_environment(tmp_path, monkeypatch):
    binary = _executable(tmp_path / "nsys-install" / "bin" / "nsys")
    monkeypatch.setenv("HYBRID_NSYS", str(binary))
    assert nsys.find_nsys() == binary
    monkeypatch.setenv("HYBRID_NSYS", str(tmp_path / "nsys-install"))  # the install folder works too
    assert nsys.find_nsys() == binary
    monkeypatch.setenv("HYBRID_NSYS", str(tmp_path / "missing"))
    assert nsys.find_nsys() is None


def test_find_nsys_inside_nsight_compute_picks_the_newest(tmp_path, monkeypatch):
    monkeypatch.delenv("HYBRID_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    old = _executable(tmp_path / "nsight-compute" / "2024.1.0" / "host" / "target-linux-x64" / "nsys")
    new = _executable(tmp_path / "nsight-compute" / "2025.3.1" / "host" / "target-linux-x64" / "nsys")
    (tmp_path / "nsight-compute" / "2025.4.0" / "host" / "target-linux-x64" / "nsys").mkdir(parents=True)
    monkeypatch.setattr(
        nsys, "NSYS_GLOBS", (str(tmp_path / "nsight-compute" / "*" / "host" / "target-linux-x64" / "nsys"),)
    )
    # 2025.4.0 is a folder without bin/nsys: skipped, not returned
    assert nsys.find_nsys() == new != old


def test_a_binary_that_is_not_nsys_is_a_tool_failure(tmp_path):
    with pytest.raises(ToolFailed, match="--version` failed"):
        nsys.run_nsys(
            Path(shutil.which("false")), tmp_path / "profile", ["python", "-c", "pass"], capture_range=False
        )


def test_missing_export_quotes_the_log_and_names_the_fix(tmp_path):
    log = (
        "Collecting data...\n"
        "/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys: error while loading shared "
        "libraries: libdw.so.1: cannot open shared object file: No such file or directory\n"
    )
    with pytest.raises(ToolFailed) as info:
        nsys.check_export(tmp_path / "profile", 127, log, tmp_path / "nsys.log")
    assert "wrote no profile.sqlite" in info.value.cause and "libdw.so.1: cannot open" in info.value.cause
    assert "libdw1" in info.value.fix and info.value.kept == str(tmp_path / "nsys.log")
    (tmp_path / "profile.sqlite").touch()
    assert nsys.check_export(tmp_path / "profile", 0, "") == tmp_path / "profile.sqlite"


@pytest.mark.gpu
def test_real_nsys_pass_on_the_gpu(tmp_path):
    """A real capture with our NVTX conventions, loaded back: needs nsys and a CUDA GPU."""
    binary = nsys.find_nsys()
    assert binary is not None, "no nsys found: set HYBRID_NSYS"
    script = tmp_path / "work.py"
    script.write_text(
        "import torch, nvtx\n"
        "x = torch.randn(2048, 2048, device='cuda')\n"
        "for i in range(3):\n"
        "    with nvtx.annotate(f'step {i}', domain='hybrid'):\n"
        "        y = x @ x\n"
        "        y.sum().item()\n"
        "torch.cuda.synchronize()\n"
    )
    run = nsys.run_nsys(
        binary,
        tmp_path / "profile",
        [sys.executable, str(script)],
        capture_range=False,
        log_path=tmp_path / "nsys.log",
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        },
    )
    from hybrid.load.nsys_export import load_nsys_export

    profile = load_nsys_export(run.sqlite_path)
    assert profile.step_source == "nvtx:hybrid" and len(profile.steps) == 3
    assert (profile.kernels.groupby("step").size().loc[[0, 1, 2]] >= 2).all()
    assert profile.device.sm_count and profile.device.name
