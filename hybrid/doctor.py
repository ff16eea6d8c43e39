"""`hybrid doctor`: what this machine can measure, and which mode `hybrid run` would use and why."""

from __future__ import annotations

import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from hybrid.errors import ProfilerError
from nsight.tool_probe import PROBE_TIMEOUT_ENV, probe_timeout_s, run_bounded

# A CUDA kernel small enough to profile in seconds, to learn whether counters are permitted.
_COUNTER_PROBE = "import torch; x = torch.ones(1024, device='cuda'); print(float((x * 2).sum()))"
COUNTER_PROBE_TIMEOUT_S = 120


def _torch_facts() -> dict:
    try:
        import torch
    except ImportError as error:
        return {"torch": None, "torch_error": str(error), "cuda_available": False}
    facts = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    if facts["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        facts.update(
            gpu=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_bytes=props.total_memory,
            sm_count=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}",
        )
    return facts


def _counters_permitted(ncu_path: Path) -> tuple[bool | None, str]:
    """Run ncu on a one-kernel program: the only reliable test of ERR_NVGPUCTRPERM."""
    from hybrid.collect import ncu_tool as ncu

    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            str(ncu_path),
            "--clock-control",
            "none",
            "--metrics",
            "gpu__time_duration.sum",
            "--csv",
            "--log-file",
            f"{tmp}/ncu.log",
            sys.executable,
            "-c",
            _COUNTER_PROBE,
        ]
        try:
            done = run_bounded(argv, COUNTER_PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"ncu did not finish a one-kernel probe in {COUNTER_PROBE_TIMEOUT_S} s"
        except OSError as error:
            return None, f"ncu could not be started: {error.strerror or error}"
        log = Path(f"{tmp}/ncu.log").read_text(errors="replace") if Path(f"{tmp}/ncu.log").exists() else ""
        error = ncu.check_counter_permission(log + done.stdout + done.stderr)
        if error is not None:
            return False, error.message()
        return done.returncode == 0, "counters readable" if done.returncode == 0 else log[-500:]


def diagnose_environment(*, probe_counters: bool = True) -> dict:
    from hybrid.collect import ncu_tool as ncu
    from hybrid.collect import nsys_tool as nsys

    facts: dict = {"python": sys.version.split()[0], "platform": platform.platform(), **_torch_facts()}
    nsys_path, ncu_path = nsys.find_nsys(), ncu.find_ncu()
    facts["nsys"] = str(nsys_path) if nsys_path else None
    facts["nsys_version"], facts["nsys_error"] = None, None
    if nsys_path:
        try:
            facts["nsys_version"] = nsys.nsys_version(nsys_path)
        except ProfilerError as error:  # a binary that fails or hangs: said, and not used
            facts["nsys_error"] = error.cause
    facts["ncu"] = str(ncu_path) if ncu_path else None
    facts["ncu_version"] = ncu.ncu_version(ncu_path) if ncu_path else None
    facts["ncu_error"] = None
    if ncu_path and facts["ncu_version"] is None:
        facts["ncu_error"] = (
            f"`{ncu_path} --version` did not answer with a version within "
            f"{probe_timeout_s():g} s ({PROBE_TIMEOUT_ENV} to wait longer)"
        )
    facts["counters_permitted"], facts["counters_detail"] = (None, "not checked")
    if probe_counters and ncu_path and facts["cuda_available"] and facts["ncu_error"] is None:
        facts["counters_permitted"], facts["counters_detail"] = _counters_permitted(ncu_path)
    facts["mode"], facts["mode_reason"] = _would_use(facts)
    facts["next_steps"] = next_steps(facts)
    return facts


def _would_use(facts: dict) -> tuple[str, str]:
    if not facts.get("torch"):
        return "none", "torch is not installed: pip install torch"
    if not facts["cuda_available"]:
        return (
            "cpu-only",
            "no CUDA device is visible: the torch pass runs on the CPU and GPU analysis is skipped",
        )
    if not facts["nsys"]:
        return "torch-only", "nsys not found (install Nsight Systems or set HYBRID_NSYS)"
    if facts.get("nsys_error"):
        return "torch-only", f"nsys does not work: {facts['nsys_error']}"
    if not facts["ncu"]:
        return "nsys", "ncu not found (install Nsight Compute or set HYBRID_NCU)"
    if facts.get("ncu_error"):
        return "nsys", f"ncu does not work: {facts['ncu_error']}"
    if facts["counters_permitted"] is False:
        return "nsys", "ncu cannot read GPU counters here (ERR_NVGPUCTRPERM): see the fix above"
    return "hybrid", "torch.profiler, nsys and ncu are all available"


INSTALL_NSYS = (
    "Nsight Systems gives the measured timeline: install it from "
    "https://developer.nvidia.com/nsight-systems (or NVIDIA's CUDA apt/dnf repository: "
    "`apt-get install nsight-systems-<version>`; recent CUDA toolkits bundle it), then put `nsys` on "
    "PATH or set HYBRID_NSYS=/path/to/nsys"
)
INSTALL_NCU = (
    "Nsight Compute gives the hardware counters (roofline, cache, occupancy): it ships with the CUDA "
    "toolkit (/usr/local/cuda/bin/ncu) or https://developer.nvidia.com/nsight-compute "
    "(`apt-get install nsight-compute-<version>`); put `ncu` on PATH or set HYBRID_NCU=/path/to/ncu"
)


def next_steps(facts: dict) -> list[str]:
    """What to install or allow to reach the hybrid mode, from what this machine lacks."""
    from nsight.ncu import PERMISSION_FIX

    steps = []
    if not facts.get("torch"):
        steps.append("install torch: https://pytorch.org/get-started/locally/")
    if facts.get("torch") and not facts.get("cuda_available"):
        steps.append(
            "no CUDA device is visible to torch: GPU analysis needs an NVIDIA GPU, its driver and a CUDA "
            "build of torch; on this machine `hybrid report` still re-analyzes runs made elsewhere"
        )
    if not facts.get("nsys"):
        steps.append(INSTALL_NSYS)
    for tool in ("nsys", "ncu"):
        if facts.get(f"{tool}_error"):
            steps.append(
                f"{facts[tool]} does not work ({facts[f'{tool}_error']}): repair that install, or "
                f"point HYBRID_{tool.upper()} at a working {tool}"
            )
    if not facts.get("ncu"):
        steps.append(INSTALL_NCU)
    if facts.get("counters_permitted") is False:
        steps.append(PERMISSION_FIX)
    return steps


def _permitted(value: bool | None) -> str:
    return {True: "readable", False: "NOT permitted", None: "unknown"}[value]


def render_doctor(facts: dict) -> str:
    """The facts as aligned lines, then what to do about what is missing; control characters in tool
    output and paths are escaped like in every report."""
    from hybrid.report.safe_text import escape_strings

    steps = facts.get("next_steps") or next_steps(facts)
    facts = escape_strings(facts)

    def show(value) -> str:
        return "not found" if value is None else str(value)

    lines = [
        f"python      {facts['python']}  ({facts['platform']})",
        f"torch       {show(facts.get('torch'))}  (CUDA build {show(facts.get('torch_cuda'))})",
        f"GPU         {facts.get('gpu', 'none visible')}"
        + (
            f"  {facts.get('sm_count')} SMs, cc {facts.get('compute_capability')}" if facts.get("gpu") else ""
        ),
        *(
            (
                f"{tool:<12}{show(facts[tool])}  "
                f"{facts[tool + '_version'] or facts.get(tool + '_error') or ''}"
            ).rstrip()
            for tool in ("nsys", "ncu")
        ),
        f"counters    {_permitted(facts['counters_permitted'])}  ({facts['counters_detail']})",
        f"mode        `hybrid run` would use: {facts['mode']} ({facts['mode_reason']})",
    ]
    lines += [
        f"to do       {step}" if index == 0 else f"            {step}"
        for index, step in enumerate(escape_strings(steps))
    ]
    return "\n".join(lines) + "\n"
