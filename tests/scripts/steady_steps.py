"""Steps of a steady 50 ms (a sleep beside a small matmul), marked with hybrid.mark_step(): warmup settles
after its requested count even on a loaded 2-core box (wake-up jitter stays inside the 10% tolerance at
50 ms, tests/scripts/unmarked/settles_late.py). Usage: steady_steps.py ITERATIONS"""

import sys
import time

import torch

import hybrid

a = torch.randn(64, 64)
for _ in range(int(sys.argv[1])):
    a = torch.tanh(a @ a)
    time.sleep(0.05)
    hybrid.mark_step()
print("ran all", sys.argv[1])
