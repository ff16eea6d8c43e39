"""What the user sees while passes run: the pass, its elapsed time and the steps done. A live rich
line on a terminal; one plain line per pass start/end otherwise; nothing with --quiet."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from hybrid.report.safe_text import escape_controls
from nsight.ncu import profiled_kernel

PASS_TITLES = {
    "plain": "baseline run (no collector)",
    "torch": "torch.profiler pass",
    "nsys": "Nsight Systems pass",
    "ncu": "Nsight Compute pass (hardware counters)",
    "calibration": "calibration (GEMM/conv micro-benchmarks, no collector)",
}


# Collector output lines worth showing while a pass runs (nsys 2025.3 prints these around its export).
COLLECTOR_STAGES = (
    "Collecting data",
    "Generating",
    "Processing",
    "Exporting",
    "[1/",
    "[2/",
    "[3/",
    "==PROF== Connected",
)


class _View:
    def __init__(self, console: Console, live: bool) -> None:
        self.console = console
        self.live = live
        self.status: Status | None = None
        self.started: dict[str, float] = {}
        self.detail = ""
        self.totals: dict[str, str] = {}
        self.replayed = 0

    def __call__(self, name: str, event: str, detail: str) -> None:
        title = PASS_TITLES.get(name, name)
        detail = escape_controls(detail)  # collector output and paths: shown, never acted on by the terminal
        if event == "total":
            self.totals[name] = detail
        elif event == "start":
            self.started[name] = time.monotonic()
            self.replayed = 0
            self.detail = detail or "starting"
            if self.live:
                self.status = self.console.status(f"{title}: {escape(self.detail)}")
                self.status.start()
            else:
                self.console.print(f"hybrid: {title}: {escape(self.detail)}", highlight=False)
        elif event == "line" and (kernel := profiled_kernel(detail)) is not None:
            self.replayed += 1
            if self.status is None:
                return
            total = self.totals.get(name)
            elapsed = time.monotonic() - self.started.get(name, time.monotonic())
            # The total counts launch configurations in the nsys pass's step; ncu can tell a few more apart.
            of = f" of ~{total}" if total and self.replayed <= int(total) else ""
            self.status.update(
                f"{title}: replayed {self.replayed}{of} launches, "
                f"last {escape(escape_controls(kernel[:60]))}  [{elapsed:.0f} s]"
            )
        elif event == "line" and self.status is not None and detail.lstrip().startswith(COLLECTOR_STAGES):
            # nsys's own stage lines (capture done, report generation, SQLite export): the slow tail of
            # a pass.
            elapsed = time.monotonic() - self.started.get(name, time.monotonic())
            self.status.update(f"{title}: {escape(escape_controls(detail.strip()[:80]))}  [{elapsed:.0f} s]")
        elif event == "step" and self.status is not None:
            self.detail = detail
            elapsed = time.monotonic() - self.started.get(name, time.monotonic())
            self.status.update(f"{title}: {escape(detail)}  [{elapsed:.0f} s]")
        elif event == "end":
            elapsed = time.monotonic() - self.started.get(name, time.monotonic())
            if self.status is not None:
                self.status.stop()
                self.status = None
            replayed = f", {self.replayed} launches replayed" if self.replayed else ""
            self.console.print(
                f"hybrid: {title}: {escape(detail)}{replayed} after {elapsed:.1f} s", highlight=False
            )

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()


def _silent(_name: str, _event: str, _detail: str) -> None:
    return None


@contextmanager
def progress_view(*, quiet: bool) -> Iterator:
    if quiet:
        yield _silent
        return
    console = Console(file=sys.stderr)
    view = _View(console, live=console.is_terminal)
    try:
        yield view
    finally:
        view.close()
