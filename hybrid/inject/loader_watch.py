"""How the batches of a torch DataLoader are fetched inside the measured window: the calls of its iterator's
__next__, their wall time and the CPU time of the thread that made them. A fetch that mostly waits (reads
from slow storage or the network) is sped up by more workers than the machine has cores, one that computes
(decoding, augmenting) only by as many as it has free: on one core, batches of 16 items that each wait
10 ms took 168 ms a step with one worker and 42 ms with four. The wall time alone cannot tell the two
apart.

Standard library only (torch is found in sys.modules, never imported). Each call costs two clock reads of
each kind; __next__ runs once a batch."""

from __future__ import annotations

import functools
import sys
import time
from typing import Any


class LoaderWatch:
    def __init__(self) -> None:
        self.fetches = 0
        self.wall_ns = 0
        self.cpu_ns = 0
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
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return original(iterator)
            finally:
                self.cpu_ns += time.thread_time_ns() - cpu
                self.wall_ns += time.perf_counter_ns() - wall
                self.fetches += 1

        iterator_class.__next__ = timed_next
        self._original, self._iterator_class, self._watched = original, iterator_class, True

    def stop(self) -> None:
        if self._original is not None:
            self._iterator_class.__next__ = self._original
            self._original = self._iterator_class = None

    def facts(self) -> dict | None:
        """inject.json `data_loader`: batches fetched in the window, and the wall and thread CPU time
        (ms) of those fetches; None where no DataLoader module was loaded when the window opened, or no
        batch was fetched in it. The CPU time is the fetching thread's: work a fetch hands to torch's
        intra-op threads is not in it."""
        if not self._watched or not self.fetches:
            return None
        return {"fetches": self.fetches, "wall_ms": self.wall_ns / 1e6, "cpu_ms": self.cpu_ns / 1e6}
