"""Replay speed: build the graph and replay every step of an export, timing each part.

    python benchmarks/make_large_export.py 100000 /tmp/nsys_100k.sqlite --kernels-per-step 1000
    python benchmarks/bench_replay.py /tmp/nsys_100k.sqlite [--repeat 3]

Prints kernels, steps, the export's load time, graph build, one replay of all steps and the replay
time per 1,000-kernel step (best of --repeat), as one markdown table row.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hybrid.load.nsys_export import load_nsys_export
from hybrid.replay.graph import build_graph
from hybrid.replay.simulate import replay_step


def _best(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    load_s, profile = _best(lambda: load_nsys_export(args.export), 1)
    build_s, graph = _best(lambda: build_graph(profile), args.repeat)
    replay_s, replay = _best(lambda: replay_step(graph), args.repeat)
    kernels = int((graph.d_kind == 0).sum())
    steps = len(graph.step_ids)
    per_1k_ms = replay_s / kernels * 1000 * 1e3
    error = abs(replay.step_ns / graph.measured_step_ns - 1).max() * 100
    print(
        "| export | kernels | steps | load s | graph build s | replay of all steps s "
        "| replay per 1,000 kernels ms | max step error % |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.export.name} | {kernels} | {steps} | {load_s:.2f} | {build_s:.3f} | {replay_s:.3f} "
        f"| {per_1k_ms:.1f} | {error:.2f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
