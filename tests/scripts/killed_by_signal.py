"""Trains a few steps, then kills itself with the signal named by its first argument (KILL, SEGV, ...):
how the OOM killer or a native crash ends a real training script."""

import os
import signal
import sys

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(4, 4).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    model(torch.randn(2, 4, device=device)).sum().backward()
    optimizer.step()
    if step == 3:
        os.kill(os.getpid(), getattr(signal, f"SIG{sys.argv[1]}"))
