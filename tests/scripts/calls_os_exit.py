"""Appends one line to the file named by its first argument each time it starts (a side effect that must
not happen twice), trains three steps, then leaves through os._exit(0)."""

import os
import sys

import torch

with open(sys.argv[1], "a") as runs:
    runs.write("started\n")
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
os._exit(0)
