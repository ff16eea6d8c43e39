"""Where the user's code called each torch operator, from a torch.profiler trace recorded with
Python stacks (with_stack=True).

The profiler writes every Python call as a `python_function` event on its thread: its name is the
called function ('t.py(3): work', '<built-in method item of Tensor object at 0x...>') and its
`CallFrom` arg the calling line ('t.py:5'). An operator's callsite is the nearest calling line, from
the innermost Python call that encloses it outwards, that lies in the user's files. The profiler
writes paths relative to the sys.path entry they were found under (the script's folder, the
standard library, site-packages), so a relative path is a library file when its top-level module is
one of the standard library or of an installed distribution.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from importlib import metadata

import numpy as np
import pandas as pd

from hybrid.profile import OP_CALLSITE_COLUMNS, SAMPLE_COLUMNS, empty_frame
from nsight.intervals import NO_RANGE, nesting_parents, stab_innermost
from nsight.python_frames import is_hybrid_file, is_user_file

# The recorded calls are read every 100 us (stack_samples): finer than nsys's 1 kHz sampling, and
# ten thousand points a second of trace stay cheap.
STACK_SAMPLE_PERIOD_NS = 100_000
# 'file(line): function' names of Python-defined functions (not '<built-in ...>' ones).
PY_FUNCTION = re.compile(r"^(.*)\((\d+)\): (.+)$")
CALL_FROM = re.compile(r"^(.*):(\d+)$")
# Top-level packages of a PyTorch stack, for traces read where they are not installed.
KNOWN_LIBRARIES = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "numpy",
        "triton",
        "functorch",
        "transformers",
        "timm",
        "lightning",
        "pytorch_lightning",
        "accelerate",
        "nvtx",
        "hybrid",
        "typing_extensions",
    }
)


@cache
def _installed_top_levels() -> frozenset[str]:
    return frozenset(metadata.packages_distributions())


def is_user_trace_file(path: str) -> bool:
    """A file the profiler named is the user's (see the module docstring)."""
    if not is_user_file(path):
        return False
    if path.startswith("/"):
        return True
    top = re.split(r"[/\\]", path, maxsplit=1)[0].removesuffix(".py")
    return not (top in sys.stdlib_module_names or top in KNOWN_LIBRARIES or top in _installed_top_levels())


def _sites(calls: pd.DataFrame, parents: np.ndarray) -> tuple[list, list, list]:
    """(file, line, function) of the user line behind each Python call (None when there is none);
    parents precede their children in `calls`."""
    files: list = [None] * len(calls)
    lines: list = [-1] * len(calls)
    functions: list = [None] * len(calls)
    names = calls["name"].tolist()
    call_from = [a.get("CallFrom") for a in calls["args"]]
    for i, parent in enumerate(parents.tolist()):
        match = CALL_FROM.match(call_from[i] or "")
        if match and is_hybrid_file(match.group(1)):
            continue  # called by hybrid's injector or step marker: the time is hybrid's, no user line
        if match and is_user_trace_file(match.group(1)):
            caller = PY_FUNCTION.match(names[parent]) if parent != NO_RANGE else None
            files[i], lines[i] = match.group(1), int(match.group(2))
            functions[i] = caller.group(3) if caller else "<module>"
        elif parent != NO_RANGE:
            files[i], lines[i], functions[i] = files[parent], lines[parent], functions[parent]
    return files, lines, functions


def _threads(events: pd.DataFrame):
    """Per thread with Python calls: the calls sorted for nesting, their parents and user sites."""
    calls = events[events["cat"] == "python_function"]
    for tid, group in calls.groupby("tid"):
        group = group.sort_values(["start_ns", "end_ns"], ascending=[True, False]).reset_index(drop=True)
        starts, ends = group["start_ns"].to_numpy(np.int64), group["end_ns"].to_numpy(np.int64)
        parents = nesting_parents(ends)
        yield int(tid), starts, ends, parents, _sites(group, parents)


def stack_samples(events: pd.DataFrame, period_ns: int = STACK_SAMPLE_PERIOD_NS) -> pd.DataFrame:
    """SAMPLE_COLUMNS read off the recorded Python calls: every `period_ns` on each thread, the user
    line of the innermost call open then. The calls are exact; sampling them on a grid gives the
    same shape as nsys's samples, so one attribution serves both."""
    rows = []
    for tid, starts, ends, parents, (files, lines, functions) in _threads(events):
        grid = np.arange(int(starts.min()), int(ends.max()), period_ns, dtype=np.int64)
        inner = stab_innermost(grid, starts, ends, parents)
        found = inner != NO_RANGE
        pick = inner[found]
        rows.append(
            pd.DataFrame(
                {
                    "start_ns": grid[found],
                    "end_ns": grid[found] + period_ns,
                    "tid": tid,
                    "file": np.array(files, dtype=object)[pick],
                    "line": np.array(lines, dtype=np.int64)[pick],
                    "function": np.array(functions, dtype=object)[pick],
                    # The recorded calls name each function's first line, not the line running in it.
                    "library_file": None,
                    "library_line": -1,
                    "library_function": None,
                }
            )
        )
    if not rows:
        return empty_frame(SAMPLE_COLUMNS)
    return pd.concat(rows, ignore_index=True).astype(
        {c: d for c, d in SAMPLE_COLUMNS.items() if d != "object"}
    )


def op_callsites(events: pd.DataFrame) -> pd.DataFrame:
    """OP_CALLSITE_COLUMNS from a trace's complete events (torch_pass._complete_events): host time
    of each operator name per user line; empty when the trace has no Python stacks."""
    calls = events[events["cat"] == "python_function"]
    ops = events[events["cat"] == "cpu_op"]
    if calls.empty or ops.empty:
        return empty_frame(OP_CALLSITE_COLUMNS)
    rows = []
    for tid, starts, ends, parents, (files, lines, functions) in _threads(events):
        own = ops[ops["tid"] == tid]
        if own.empty:
            continue
        inner = stab_innermost(own["start_ns"].to_numpy(np.int64), starts, ends, parents)
        found = inner != NO_RANGE
        pick = np.clip(inner, 0, None)
        rows.append(
            pd.DataFrame(
                {
                    "op": own["name"].to_numpy(),
                    "file": np.where(found, np.array(files, dtype=object)[pick], None),
                    "line": np.where(found, np.array(lines, dtype=np.int64)[pick], -1),
                    "function": np.where(found, np.array(functions, dtype=object)[pick], None),
                    "ns": (own["end_ns"] - own["start_ns"]).to_numpy(np.int64),
                }
            )
        )
    placed = pd.concat(rows, ignore_index=True) if rows else empty_frame(OP_CALLSITE_COLUMNS)
    # Operators on threads without Python calls (autograd's backward thread) keep no line but count
    # in each operator's total.
    unplaced = ops[~ops["tid"].isin(calls["tid"].unique())]
    if len(unplaced):
        placed = pd.concat(
            [
                placed,
                pd.DataFrame(
                    {
                        "op": unplaced["name"].to_numpy(),
                        "file": None,
                        "line": -1,
                        "function": None,
                        "ns": (unplaced["end_ns"] - unplaced["start_ns"]).to_numpy(np.int64),
                    }
                ),
            ],
            ignore_index=True,
        )
    keys = ["op", "file", "line", "function"]
    grouped = placed.groupby(keys, dropna=False, sort=False)["ns"].sum().reset_index()
    return grouped.astype({"line": "int64", "ns": "int64"})[list(OP_CALLSITE_COLUMNS)]
