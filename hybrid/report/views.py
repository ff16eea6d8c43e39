"""The command that opens each raw artifact of a run in the tool made for it: the nsys report in the Nsight
Systems GUI, the ncu report in the Nsight Compute GUI, the torch trace in Perfetto (or TensorBoard /
HTA, which read its ProfilerStep ranges). `results["artifacts"]` (written by hybrid.pipeline) lists the
files that exist, relative to the run directory."""

from __future__ import annotations

import shlex
from pathlib import PurePath

PERFETTO_URL = "https://ui.perfetto.dev"

# artifact key -> (what it is, how to open it); {path} is the file, quoted for a shell.
VIEWERS = {
    "nsys_report": ("timeline (Nsight Systems)", "nsys-ui {path}"),
    "ncu_report": ("kernel counters (Nsight Compute)", "ncu-ui {path}"),
    "torch_trace": ("torch trace", f"open {PERFETTO_URL} and load {{path}}"),
}


def artifact_views(results: dict, location: str | None = None) -> list[tuple[str, str]]:
    """(what, command) for each artifact the run kept; paths joined to `location` (the run directory as
    the user named it) when given."""
    artifacts = results.get("artifacts") or {}
    views = []
    for key, (what, command) in VIEWERS.items():
        relative = artifacts.get(key)
        if not isinstance(relative, str) or not relative:
            continue
        path = str(PurePath(location) / relative) if location else relative
        views.append((what, command.format(path=shlex.quote(path))))
    return views
