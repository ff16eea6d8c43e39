"""Inference-style loop without an optimizer, marking steps with hybrid.mark_step() and, in the
second half, `with hybrid.step():`."""

import sys

import torch

import hybrid

iters = int(sys.argv[1])
model = torch.nn.Linear(64, 64)
x = torch.randn(8, 64)
hybrid.set_batch_size(8)
with torch.no_grad():
    for i in range(iters):
        if i % 2:
            with hybrid.step():
                model(x).relu().sum()
        else:
            model(x).relu().sum()
            hybrid.mark_step()
print("finished all iterations")
