"""The one thing the unmarked workloads share: their own per-iteration clock, for the reference table.

Each workload is a plain script a user could have written: no hybrid import, no step marks. It times
itself the way its author would (device synchronized once before and once after the timed iterations,
never inside them) and prints one `ITER_MS` line, which benchmarks/unmarked/README.md compares with the
step time hybrid detects. Under `hybrid run` the script is stopped after the measured steps, before it
prints.
"""

from __future__ import annotations

import argparse
import time

import torch


def parse_args(description: str, default_iters: int = 60, extra: list[tuple[str, dict]] | None = None
               ) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=default_iters, help="loop iterations")
    parser.add_argument("--skip", type=int, default=10, help="iterations before the clock starts")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for flag, kwargs in extra or []:
        parser.add_argument(flag, **kwargs)
    return parser.parse_args()


class IterClock:
    """Starts at iteration `skip`, stops after the last; one device sync at each end."""

    def __init__(self, device: str, skip: int, unit: str = "iteration") -> None:
        self.device, self.skip, self.unit = torch.device(device), skip, unit
        self.count = 0
        self.start: float | None = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def tick(self) -> None:
        """Call at the start of every iteration."""
        if self.count == self.skip:
            self._sync()
            self.start = time.perf_counter()
        self.count += 1

    def report(self, name: str, per: int = 1) -> None:
        self._sync()
        if self.start is None:
            print(f"ITER_MS name={name} none (fewer than {self.skip} iterations)")
            return
        timed = self.count - self.skip
        ms = (time.perf_counter() - self.start) * 1e3 / timed
        print(f"ITER_MS name={name} {self.unit}_ms={ms:.4f} timed={timed}"
              + (f" per_{self.unit}_sub={per} sub_ms={ms / per:.4f}" if per > 1 else ""), flush=True)
