"""How the batches of a torch DataLoader are fetched inside the measured window: the calls of its iterator's
__next__, their wall time, and how long the thread that made them ran on a CPU and waited for one. A fetch
that mostly waits for storage or the network is sped up by more workers than the machine has cores, one that
computes (decoding, augmenting) only by as many as it has free: on one core, batches of 16 items that each
wait 10 ms took 168 ms a step with one worker and 42 ms with four. The wall time alone cannot tell the two
apart, nor can the CPU time on a loaded machine: under CI's load a fetch of pure Python loops ran on a CPU
43% of its time and waited for one most of the rest, which Linux's per-thread schedstat tells apart.

Standard library only (torch is found in sys.modules, never imported). Each call reads the clock and the
thread's scheduler counters (/proc/thread-self/schedstat, ~8 us) twice; __next__ runs once a batch."""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

SCHEDSTAT = "/proc/thread-self/schedstat"


def _scheduled_ns() -> tuple[int, int | None]:
    """The calling thread's time on a CPU and, where Linux's schedstat is readable, its time waiting in the
    run queue for one (None elsewhere: the CPU time comes from time.thread_time_ns then)."""
    try:
        with open(SCHEDSTAT, "rb") as counters:
            on_cpu, runnable = counters.read().split()[:2]
        return int(on_cpu), int(runnable)
    except (OSError, ValueError):
        return time.thread_time_ns(), None


class LoaderWatch:
    def __init__(self) -> None:
        self.fetches = 0
        self.wall_ns = 0
        self.cpu_ns = 0
        self.runnable_ns: int | None = 0  # None once a fetch could not read it
        self._original: Any = None
        self._iterator_class: Any = None
        self._watched = False

    def start(self) -> None:
        """Time every batch fetched from here on (until stop); nothing where torch.utils.data is not loaded
        (a script without a DataLoader)."""
        dataloader = sys.modules.get("torch.utils.data.dataloader")
        iterator_class = getattr(dataloader, "_BaseDataLoaderIter", None)
        if iterator_class is None or self._original is not None:
            return
        original = iterator_class.__next__

        @functools.wraps(original)
        def timed_next(iterator: Any) -> Any:
            wall, (cpu, runnable) = time.perf_counter_ns(), _scheduled_ns()
            try:
                return original(iterator)
            finally:
                cpu_end, runnable_end = _scheduled_ns()
                self.cpu_ns += cpu_end - cpu
                if runnable is None or runnable_end is None or self.runnable_ns is None:
                    self.runnable_ns = None
                else:
                    self.runnable_ns += runnable_end - runnable
                self.wall_ns += time.perf_counter_ns() - wall
                self.fetches += 1

        iterator_class.__next__ = timed_next
        self._original, self._iterator_class, self._watched = original, iterator_class, True

    def stop(self) -> None:
        if self._original is not None:
            self._iterator_class.__next__ = self._original
            self._original = self._iterator_class = None

    def facts(self) -> dict | None:
        """inject.json `data_loader`: batches fetched in the window, and the wall time of those fetches,
        the fetching thread's time on a CPU and waiting for one (`runnable_ms`, None without schedstat),
        in ms; None where no DataLoader module was loaded when the window opened, or no batch was fetched
        in it. The times are the fetching thread's: work a fetch hands to torch's intra-op threads is not
        in them."""
        if not self._watched or not self.fetches:
            return None
        return {
            "fetches": self.fetches,
            "wall_ms": self.wall_ns / 1e6,
            "cpu_ms": self.cpu_ns / 1e6,
            "runnable_ms": None if self.runnable_ns is None else self.runnable_ns / 1e6,
        }
