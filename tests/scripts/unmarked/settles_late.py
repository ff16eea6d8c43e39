"""A loop whose first iterations are slow and get faster (sleeping 50 ms + 400 ms x 0.6^i, like first calls
that autotune and warm caches), then steady at about 50 ms: warmup must last until the step times
settle, past the requested count. The steady step is long enough that a loaded 2-core box's wake-up
jitter stays inside the 10% settling tolerance (at 10 ms it did not: 60, 12, 52 ms)."""

import time

import torch

a = torch.randn(64, 64)
for i in range(80):
    a = torch.tanh(a @ a)
    time.sleep(0.05 + 0.4 * 0.6**i)
