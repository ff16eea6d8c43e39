"""Which frames of a Python stack are the user's own code.

A callsite is the first frame of a stack, leaf first, that lies in the user's files: not in the
standard library, not in an installed package (site-packages, dist-packages: torch, numpy, ...),
not in an interpreter pseudo-file (`<frozen runpy>`, `<string>`), and not in the part of hybrid that
runs inside the profiled process (its injector starts the script through runpy and wraps the
optimizer's step). Decided from the path alone, so an export recorded on another machine reads the
same way here.
"""

from __future__ import annotations

import re

# .../lib/python3.12/..., .../lib64/python3.12/... (the standard library and, under it,
# site-packages), any site-packages or dist-packages folder (virtual environments, user installs),
# and <...> pseudo-files.
LIBRARY_PATH = re.compile(r"^<|/lib(64)?/python\d+(\.\d+)?/|[/\\](site|dist)-packages[/\\]|^$")
# hybrid's modules on the profiled process's stack: everything under hybrid/inject/ (the injector, its
# step markers, NVTX ranges, the rank shim), and their flat names in captures made before the package
# moved into folders (hybrid/inject.py, stepping.py, rank_inject.py, nvtx_ranges.py: the committed
# hf_trainer_fp32 capture's sampled stacks name hybrid/nvtx_ranges.py:26).
HYBRID_IN_PROCESS = re.compile(
    r"[/\\]hybrid[/\\](?:inject[/\\]\w+|inject|stepping|rank_inject|nvtx_ranges|__init__|__main__)\.py$"
)


def is_hybrid_file(path: str | None) -> bool:
    """True for hybrid's own code in the profiled process (its injector and step markers)."""
    return bool(path) and HYBRID_IN_PROCESS.search(path) is not None


def is_user_file(path: str | None) -> bool:
    """True for a source file of the user's own code (see the module docstring)."""
    if not path:
        return False
    return LIBRARY_PATH.search(path) is None and not is_hybrid_file(path)


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
