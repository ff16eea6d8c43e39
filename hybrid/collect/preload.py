"""Reads the torch pass's trace in a thread while the nsys pass runs, for the analysis the ncu plan rests on.

The plan waits for that analysis between the nsys and ncu passes, and reading the trace is most of it:
resnet50 b64 on the H100 (session 21) planned in 3.6 s, of which the trace took about 1.9 s (load_run_dir
on this run directory: torch trace 1.9 s, nsys export 0.18 s, analysis 0.64 s on a 2-core box). While the
nsys pass runs, the orchestrator's process only relays the child's output, so the trace is read then, on a
core the workload does not need: only where the process may use MIN_CPUS cores or more, so a small box
(CI's 2 cores) keeps every core for the workload being timed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from hybrid.host_cpus import usable_cpus

if TYPE_CHECKING:
    from hybrid.profile import Profile

# The workload's main thread, its launch or DataLoader threads and nsys's own: 4 cores leave one to spare.
MIN_CPUS = 4


class TracePreload:
    """The torch trace at `trace`, read in a daemon thread (a Ctrl-C must not wait for it)."""

    def __init__(self, trace: Path) -> None:
        self.trace = trace
        self._profile: Profile | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, name="hybrid-trace-preload", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        # Imported in the thread: in the caller, the import (0.84 s for hybrid.pipeline in a fresh process
        # on the H100) sat in the 1.16 s between the torch and nsys passes of session 22's resnet50 run.
        # The caller has made its own imports for the pass by then (hybrid.collect.orchestrate starts this
        # just before the nsys child).
        from hybrid.load.torch_trace import load_torch_trace

        try:
            self._profile = load_torch_trace(self.trace)
        except BaseException as error:  # noqa: BLE001 - raised again, as loading it in place would
            self._error = error

    def loader(self) -> Callable[[Path], Profile]:
        """A torch trace loader for hybrid.pipeline.load_run_dir: this trace's profile once read (the same
        InputError a damaged trace raises in place), any other trace read then."""

        def load(trace: Path) -> Profile:
            if trace != self.trace:
                from hybrid.load.torch_trace import load_torch_trace

                return load_torch_trace(trace)
            self._thread.join()
            if self._error is not None:
                raise self._error
            assert self._profile is not None
            return self._profile

        return load


def preload_trace(trace: Path | None, cpus: int | None = None) -> TracePreload | None:
    """The trace's preload, started; None without a trace or with fewer than MIN_CPUS usable cores."""
    if trace is None or (cpus if cpus is not None else usable_cpus()) < MIN_CPUS:
        return None
    return TracePreload(trace)
