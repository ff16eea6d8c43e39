"""Python's garbage collections inside the measured window, timed from gc.callbacks: how many ran, of
which generation, and how long the process stood in them. A step that runs a full (generation 2)
collection of a large model's object graph stalls for milliseconds; without this record, advice to
freeze the collector would be a guess. Each full collection also keeps the line that set it off: a
gc.collect() in the loop is the user's own line to change, where a collection the allocator triggered
is not.

Standard library only: it runs in the user's process before their code. A callback costs two
perf_counter_ns calls per collection, nothing per step."""

from __future__ import annotations

import gc
import linecache
import sys
import time

# Full-collection sites kept in inject.json, most time first.
SITES_KEPT = 3


class GcWatch:
    def __init__(self) -> None:
        self._started_ns: int | None = None
        self.collections = [0, 0, 0]  # per generation
        self.total_ns = 0
        self.longest_ns = 0
        self._watching = False
        self._watched = False
        self._site: tuple[str, int] | None = None
        self._full_sites: dict[tuple[str, int], list[int]] = {}  # (file, line) -> [count, ns]

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            # The Python frame running when the collection began: the caller of gc.collect(), or the
            # line whose allocation crossed the threshold. Only full collections are located (a few a
            # run); the frame lookup is one call.
            frame = sys._getframe(1) if info.get("generation") == 2 else None
            self._site = None if frame is None else (frame.f_code.co_filename, frame.f_lineno)
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
        if self._site is not None:
            held = self._full_sites.setdefault(self._site, [0, 0])
            held[0] += 1
            held[1] += spent

    def start(self) -> None:
        if not self._watching:
            gc.callbacks.append(self._callback)
            self._watching = self._watched = True

    def stop(self) -> None:
        if self._watching:
            gc.callbacks.remove(self._callback)
            self._watching = False

    def facts(self) -> dict | None:
        """inject.json `gc`: collections per generation, total and longest time, in the window, and the
        sites of the full collections (file, line, count, ms; `explicit` where that line calls
        collect()); None where the script ended before its window opened."""
        if not self._watched:
            return None
        return {
            "enabled": gc.isenabled(),
            "collections": list(self.collections),
            "ms": self.total_ns / 1e6,
            "longest_ms": self.longest_ns / 1e6,
            "full_sites": [
                {
                    "file": file,
                    "line": line,
                    "count": count,
                    "ms": ns / 1e6,
                    "explicit": "collect(" in linecache.getline(file, line),
                }
                for (file, line), (count, ns) in sorted(self._full_sites.items(), key=lambda kv: -kv[1][1])[
                    :SITES_KEPT
                ]
            ],
        }
