"""A loop whose first iterations are slow and get faster (sleeping 10 ms + 80 ms x 0.6^i, like first calls
that autotune and warm caches), then steady at about 10 ms: warmup must last until the step times
settle, past the requested count."""

import time

import torch

a = torch.randn(64, 64)
for i in range(80):
    a = torch.tanh(a @ a)
    time.sleep(0.01 + 0.08 * 0.6**i)
