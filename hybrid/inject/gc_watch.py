"""Python's garbage collections inside the measured window, timed from gc.callbacks: how many ran, of
which generation, and how long the process stood in them. A step that runs a full (generation 2)
collection of a large model's object graph stalls for milliseconds; without this record, advice to
freeze the collector would be a guess.

Standard library only: it runs in the user's process before their code. A callback costs two
perf_counter_ns calls per collection, nothing per step."""

from __future__ import annotations

import gc
import time


class GcWatch:
    def __init__(self) -> None:
        self._started_ns: int | None = None
        self.collections = [0, 0, 0]  # per generation
        self.total_ns = 0
        self.longest_ns = 0
        self._watching = False
        self._watched = False

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started_ns = time.perf_counter_ns()
            return
        if self._started_ns is None:
            return
        spent = time.perf_counter_ns() - self._started_ns
        self._started_ns = None
        generation = info.get("generation", 0)
        if 0 <= generation < len(self.collections):
            self.collections[generation] += 1
        self.total_ns += spent
        self.longest_ns = max(self.longest_ns, spent)

    def start(self) -> None:
        if not self._watching:
            gc.callbacks.append(self._callback)
            self._watching = self._watched = True

    def stop(self) -> None:
        if self._watching:
            gc.callbacks.remove(self._callback)
            self._watching = False

    def facts(self) -> dict | None:
        """inject.json `gc`: collections per generation, total and longest time, in the window; None
        where the script ended before its window opened."""
        if not self._watched:
            return None
        return {
            "enabled": gc.isenabled(),
            "collections": list(self.collections),
            "ms": self.total_ns / 1e6,
            "longest_ms": self.longest_ns / 1e6,
        }
