"""The CPU cores a process may use, and the DataLoader workers that allows: the count the loader_workers
fix gives a loader with none (hybrid.inject.apply_fix) and the count the DataLoader findings' saving assumes
(hybrid.rules.data_pipeline), so a prediction and its verification run the same workers.

Standard library only: it is imported inside every profiled process."""

from __future__ import annotations

import os

# Workers given to a loader with none: the usual advice (Hugging Face's dataloader_num_workers suggestion in
# hybrid.rules.advice) of 4, within the cores the process may use.
MAX_LOADER_WORKERS = 4
# A fetch whose thread is on a CPU less than half its time mostly waits (hybrid.inject.loader_watch): its
# waits overlap in as many workers as there are, cores or not.
WAITING_CPU_PCT = 50.0


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask, which a container or taskset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def loader_worker_count(cpus: int, fetch_cpu_pct: float | None = None) -> int:
    """DataLoader workers for a process that may use `cpus` cores, whose batch fetches ran on or waited for
    a CPU `fetch_cpu_pct` of their time (None: not measured): the usual 4 where the fetch mostly waits,
    else one a core, up to 4."""
    if fetch_cpu_pct is not None and fetch_cpu_pct < WAITING_CPU_PCT:
        return MAX_LOADER_WORKERS
    return max(1, min(MAX_LOADER_WORKERS, cpus))
