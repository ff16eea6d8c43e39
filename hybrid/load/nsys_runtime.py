"""The host API calls of an Nsight Systems export as sorted columns, with the (process, correlation) index
that ties device activity to the call that launched it."""

from __future__ import annotations

import numpy as np

from nsight.sqlite_export import NsysExport

# globalTid = (vm << 48) | (pid << 24) | tid; clearing the tid gives the globalPid that device
# activity rows carry.
TID_BITS = 24
TID_MASK = (1 << TID_BITS) - 1
PID_MASK = (1 << 24) - 1
# CUPTI correlation ids are 32-bit and unique within a process: (pid << 32 | correlation) is a
# unique key in one int64.
CORRELATION_BITS = 32


def pid_of(global_ids: np.ndarray) -> np.ndarray:
    """The process id in each globalTid or globalPid."""
    return (global_ids >> TID_BITS) & PID_MASK


def _keys(global_ids: np.ndarray, correlation: np.ndarray) -> np.ndarray:
    return (pid_of(global_ids) << CORRELATION_BITS) | (correlation & ((1 << CORRELATION_BITS) - 1))


Columns = dict[str, np.ndarray]
RUNTIME_COLUMNS = ("name_id", "start_ns", "end_ns", "correlation", "global_tid")


def take_rows(columns: Columns, rows: np.ndarray) -> Columns:
    """The given rows of every column."""
    return {name: values[rows] for name, values in columns.items()}


def by_start(columns: Columns) -> Columns:
    start = columns["start_ns"]
    if len(start) < 2 or (start[1:] >= start[:-1]).all():
        return columns  # nsys mostly writes rows in time order: no copy of every column
    return take_rows(columns, np.argsort(start, kind="stable"))


class Runtime:
    """The host API calls of interest, sorted by start, with a (pid, correlation) index for
    device activity."""

    def __init__(self, export: NsysExport, columns: Columns | None) -> None:
        if columns is None:
            columns = {name: np.empty(0, np.int64) for name in RUNTIME_COLUMNS}
        self.calls = by_start(columns)
        self.names = export.strings(self.calls["name_id"])
        keys = _keys(self.calls["global_tid"], self.calls["correlation"])
        self._order = np.argsort(keys, kind="stable")
        self._sorted_keys = keys[self._order]

    def where_name(self, predicate) -> Columns:
        """The calls whose API name satisfies `predicate`, in start order."""
        ids = [i for i, name in self.names.items() if predicate(name)]
        return take_rows(self.calls, np.flatnonzero(np.isin(self.calls["name_id"], ids)))

    def launch_of(self, global_pid: np.ndarray, correlation: np.ndarray) -> np.ndarray:
        """Row of the API call that launched each device activity, -1 when not captured."""
        keys = _keys(global_pid, correlation)
        if len(self._sorted_keys) == 0:
            return np.full(len(keys), -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self._sorted_keys, keys), 0, len(self._sorted_keys) - 1)
        return np.where(self._sorted_keys[pos] == keys, self._order[pos], -1)
