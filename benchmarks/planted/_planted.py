"""Scaffolding shared by the planted-bottleneck scripts: options, device, CPU sizes, step marks.

It keeps every script down to its workload, so a script and its fixed twin differ only by the
planted problem. The scripts run without hybrid installed (`mark_step` is then a no-op) and on
the CPU (`--device cpu`, or no CUDA device) at small sizes, slowly but correctly, as a smoke test.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

try:
    from hybrid import mark_step  # ends one step under `hybrid run`; a no-op outside it
except ImportError:  # the scripts must also run where hybrid is not installed

    def mark_step() -> None:
        pass


# The loop runs this many steps by default: above the warmup + measured steps `hybrid run` asks
# for (5 + 20 by default), since the injector stops the script once it has seen them.
DEFAULT_STEPS = 60
DEVICE_ENV = "PLANTED_DEVICE"  # lets benchmarks/run_planted.py force cpu without script arguments


def parse_args(description: str | None, extra: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(description or "").split("\n\n")[0],
                                     parents=[extra] if extra else [])
    default_device = os.environ.get(DEVICE_ENV) or ("cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=default_device)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="steps the loop runs")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda asked for, but torch sees no CUDA device (use --device cpu)")
    args.device = torch.device(args.device)
    return args


def pick(device: torch.device, gpu: int, cpu: int) -> int:
    """The H200-sized value on CUDA, a small one on the CPU (the smoke test only checks it runs)."""
    return gpu if device.type == "cuda" else cpu


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """Wall time of the whole loop, synchronized once at the end (never inside a step)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.start = time.perf_counter()

    def report(self, name: str, steps: int) -> None:
        synchronize(self.device)
        elapsed = time.perf_counter() - self.start
        print(f"{name}: {steps} steps on {self.device.type}, {1000 * elapsed / max(steps, 1):.2f} ms/step")


class WeightedSampler:
    """Host work that a training loop runs every (micro-)step: draw the next batch's sample indices
    with probability proportional to a per-sample weight (hard-example mining). numpy's weighted
    choice rebuilds the cumulative distribution on every call, ~2-3 ms for 250,000 samples on a
    server core: host time that overlaps the GPU's work unless something makes the host wait for it."""

    def __init__(self, samples: int, batch: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        weights = self.rng.random(samples)
        self.probabilities = weights / weights.sum()
        self.samples = samples
        self.batch = batch

    def next_indices(self, device: torch.device) -> torch.Tensor:
        indices = torch.from_numpy(self.rng.choice(self.samples, self.batch, p=self.probabilities))
        if device.type != "cuda":
            return indices
        # From pinned memory the copy is truly asynchronous (a pageable one can make the host wait for the
        # stream to reach it: the first H200 capture's fixed twins gained nothing). PyTorch's pinned-memory
        # cache does not hand the block out again before the copy has run.
        return indices.pin_memory().to(device, non_blocking=True)
