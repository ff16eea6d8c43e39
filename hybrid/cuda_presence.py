"""Whether torch would see a CUDA device, answered without importing torch.

`hybrid diagnose` picks its device (and, without one, the CPU sizes) before the workload's first process
starts; importing torch for that took 2.4 s on a 2-core box, paid again by every pass that imports it
itself. Two facts make torch.cuda.is_available() true: the installed torch is a CUDA build (its
torch/version.py names a CUDA version; read as text, never run) and the driver reports a device
(cuInit and cuDeviceGetCount through ctypes, which honour CUDA_VISIBLE_DEVICES as torch does)."""

from __future__ import annotations

import ast
import ctypes
import importlib.util
from pathlib import Path

CUDA_SUCCESS = 0


def torch_cuda_build(package_dir: Path | None = None) -> str | None:
    """The CUDA version the installed torch was built for (`torch.version.cuda`), None for a CPU build or
    no torch. `package_dir`: the torch package folder to read (default: the one `import torch` would load)."""
    if package_dir is None:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return None
        package_dir = Path(next(iter(spec.submodule_search_locations)))
    try:
        tree = ast.parse((package_dir / "version.py").read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and target.id == "cuda" and isinstance(value, ast.Constant):
            return str(value.value) if value.value else None
    return None


def driver_device_count() -> int:
    """CUDA devices the driver reports to this process; 0 without a driver or a device."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != CUDA_SUCCESS or libcuda.cuDeviceGetCount(ctypes.byref(count)) != CUDA_SUCCESS:
        return 0
    return count.value


def cuda_available() -> bool:
    """torch.cuda.is_available() as a process importing torch here would answer it."""
    return torch_cuda_build() is not None and driver_device_count() > 0
