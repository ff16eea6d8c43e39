"""What the in-process step detectors cost a Python-heavy loop, on this interpreter.

    python benchmarks/step_tracer_cost.py [--device cuda] [--iters 200]

The loop is a 40-block conv net at batch 1 (hundreds of module calls and Python calls per iteration,
the worst case for a tracer), timed per iteration (device synchronized at both ends) in four states:
  plain        no detector
  detecting    LoopTracer on the script's code + global module hooks (how the script runs until its
               unit is decided: a few iterations)
  loop unit    LoopTracer narrowed to the one loop (how a script_loop step is counted)
  module unit  one forward post-hook on the top-level module (how a module_call step is counted)
Prints one JSON line: ms per iteration per state and the overhead against plain, with the tracer
(sys.monitoring on 3.12+, sys.settrace before).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hybrid.inject import step_finder
from hybrid.inject.loop_trace import TRACER_NAME
from hybrid.inject.step_finder import StepFinder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    device = torch.device(args.device)
    blocks = [
        nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()) for _ in range(40)
    ]
    model = nn.Sequential(*blocks).to(device).eval()
    image = torch.randn(1, 16, 16, 16, device=device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def loop(iters: int) -> float:
        sync()
        start = time.perf_counter()
        with torch.no_grad():
            for _ in range(iters):
                model(image)
        sync()
        return (time.perf_counter() - start) * 1e3 / iters

    def best(iters: int) -> float:
        return min(loop(iters) for _ in range(3))

    loop(20)
    marks: list[str] = []
    timings = {"plain": best(args.iters)}
    # Undecided: every back-edge and top-level forward is examined (the loop above is this file's code);
    # the thresholds are lifted so that it stays undecided while timed.
    thresholds = step_finder.JUDGED_ITERATIONS, step_finder.CONSECUTIVE_CALLS
    step_finder.JUDGED_ITERATIONS = step_finder.CONSECUTIVE_CALLS = 10**9
    finder = StepFinder(marks.append, os.path.dirname(os.path.abspath(__file__)), lambda: False)
    finder.start()
    timings["detecting"] = best(args.iters)
    finder.stop()
    step_finder.JUDGED_ITERATIONS, step_finder.CONSECUTIVE_CALLS = thresholds
    finder = StepFinder(marks.append, os.path.dirname(os.path.abspath(__file__)), lambda: False)
    finder.start()
    loop(10)  # decides: the module is called once per iteration of the loop, so the loop is the unit
    timings[f"{finder.source or 'undecided'} unit"] = best(args.iters)
    finder.stop()
    handle = model.register_forward_hook(lambda module, inputs, output: marks.append("module_call"))
    timings["module hook"] = best(args.iters)
    handle.remove()
    plain = timings["plain"]
    print(
        json.dumps(
            {
                "python": sys.version.split()[0],
                "tracer": TRACER_NAME,
                "device": str(device),
                "torch": torch.__version__,
                "ms_per_iter": {k: round(v, 4) for k, v in timings.items()},
                "overhead_pct": {
                    k: round(100 * (v / plain - 1), 1) for k, v in timings.items() if k != "plain"
                },
                "decided": finder.unit,
            }
        )
    )


if __name__ == "__main__":
    main()
