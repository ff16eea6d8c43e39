"""Finding an Nsight CLI: one search order for nsys and ncu alike."""

from __future__ import annotations

import glob
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path))


def _executable_at(path: Path, binary: str) -> Path | None:
    # The binary itself, or an install folder holding it (some layouts keep it in bin/).
    for candidate in (path, path / binary, path / "bin" / binary):
        if _is_executable(candidate):
            return candidate
    return None


def find_tool(binary: str, env_var: str, install_globs: Sequence[str]) -> Path | None:
    """$env_var (the binary or its install folder; when set, nothing else is tried), then PATH, then
    the install folders matched by `install_globs`, newest version first."""
    forced = os.environ.get(env_var)
    if forced:
        return _executable_at(Path(forced), binary)
    on_path = shutil.which(binary)
    if on_path:
        return Path(on_path)
    for pattern in install_globs:
        for match in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            found = _executable_at(Path(match), binary)
            if found is not None:
                return found
    return None
