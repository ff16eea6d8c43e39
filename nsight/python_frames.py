"""Which frames of a Python stack are the user's own code, and which a library's.

A callsite is the first frame of a stack, leaf first, that lies in the user's files: not in the
standard library, not in an installed package (site-packages, dist-packages: torch, numpy, ...),
not in an interpreter pseudo-file (`<frozen runpy>`, `<string>`), not in source a library or Inductor
generated (GENERATED_MODULE, INDUCTOR_CODE), and not in the part of hybrid that runs inside the profiled
process (its injector starts the script through runpy and wraps the optimizer's step). A library frame
is one in a package other than PyTorch's own, installed or generated: the code (torchvision's detection
heads, torch_geometric's convolutions) a user line reached a call through. Decided from the path alone,
so an export recorded on another machine reads the same way here.
"""

from __future__ import annotations

import re

# .../lib/python3.12/..., .../lib64/python3.12/... (the standard library and, under it,
# site-packages), any site-packages or dist-packages folder (virtual environments, user installs),
# and <...> pseudo-files.
LIBRARY_PATH = re.compile(r"^<|/lib(64)?/python\d+(\.\d+)?/|[/\\](site|dist)-packages[/\\]|^$")
# Source a library generated and imported from a file of its own, named by its dotted module path:
# torch_geometric writes each convolution's propagate to
# /tmp/torch_geometric.nn.conv.gcn_conv_GCNConv_propagate_<random>.py.
GENERATED_MODULE = re.compile(r"(?:^|[/\\])([A-Za-z_]\w*)(?:\.\w+){2,}\.py$")
# Inductor's output code: <cache>/<2 chars>/c<hash>.py, in /tmp/torchinductor_<user>/ or the run's own
# compile cache (compiled_train_mlp's CPU-heavy ops placed 6.8% at such a file's line 1181, `call`).
INDUCTOR_CODE = re.compile(r"[/\\][a-z0-9]{2}[/\\]c[a-z0-9]{40,}\.py$")
# hybrid's modules on the profiled process's stack: everything under hybrid/inject/ (the injector, its
# step markers, NVTX ranges, the rank shim), and their flat names in captures made before the package
# moved into folders (hybrid/inject.py, stepping.py, rank_inject.py, nvtx_ranges.py: the committed
# hf_trainer_fp32 capture's sampled stacks name hybrid/nvtx_ranges.py:26).
HYBRID_IN_PROCESS = re.compile(
    r"[/\\]hybrid[/\\](?:inject[/\\]\w+|inject|stepping|rank_inject|nvtx_ranges|__init__|__main__)\.py$"
)


# An installed package's top-level folder: .../site-packages/torchvision/ops/boxes.py -> torchvision.
INSTALLED_PACKAGE = re.compile(r"[/\\](?:site|dist)-packages[/\\]([^/\\]+)[/\\]")
# PyTorch's own packages: their frames (nn.Module's call wrappers, torch.nn.functional, torch._ops) lie
# between any caller and its operators, so they never say whose code made a call.
FRAMEWORK_PACKAGES = frozenset({"torch", "torchgen", "functorch", "triton", "typing_extensions", "nvtx"})


def library_package(path: str | None) -> str | None:
    """The top-level package of an installed library file, or of source a library generated, other than
    PyTorch's own; else None."""
    match = INSTALLED_PACKAGE.search(path or "") or GENERATED_MODULE.search(path or "")
    if match is None or match.group(1) in FRAMEWORK_PACKAGES:
        return None
    return match.group(1)


def library_site(file: str, line: int, function: str | None) -> str:
    """'torchvision/ops/boxes.py:48 nms': a library frame by its path from the package's folder on (a
    generated file by its name)."""
    installed = INSTALLED_PACKAGE.search(file)
    shown = file[installed.start(1) :] if installed else re.split(r"[/\\]", file)[-1]
    return f"{shown}:{line}" + (f" {function}" if function else "")


def is_hybrid_file(path: str | None) -> bool:
    """True for hybrid's own code in the profiled process (its injector and step markers)."""
    return path is not None and HYBRID_IN_PROCESS.search(path) is not None


def is_user_file(path: str | None) -> bool:
    """True for a source file of the user's own code (see the module docstring)."""
    if not path:
        return False
    return (
        LIBRARY_PATH.search(path) is None
        and GENERATED_MODULE.search(path) is None
        and INDUCTOR_CODE.search(path) is None
        and not is_hybrid_file(path)
    )


Frame = tuple[str, int, str]  # (file, line, function)


def first_user_frame(frames: list[Frame]) -> Frame | None:
    """The first of `frames` (leaf first) in the user's files; None when there is none, or when
    hybrid's own code comes first: the time is then hybrid's (its step marker's final sync), not the
    line of the script that called into it."""
    for frame in frames:
        if is_hybrid_file(frame[0]):
            return None
        if is_user_file(frame[0]):
            return frame
    return None


def first_library_frame(frames: list[Frame]) -> Frame | None:
    """The first of `frames` (leaf first) in a library (library_package), where it comes before any user
    frame and hybrid's: the library code a user line made the call through (torchvision's
    remove_small_boxes under `model(images)`). None where the user's own line, or hybrid, made it."""
    for frame in frames:
        if is_hybrid_file(frame[0]) or is_user_file(frame[0]):
            return None
        if library_package(frame[0]) is not None:
            return frame
    return None
