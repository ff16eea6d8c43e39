"""Writes its pid to the file named by its first argument, then trains a step every 50 ms for minutes:
a long job that hybrid is stopped in the middle of."""

import os
import sys
import time

import torch

with open(sys.argv[1], "w") as pid_file:
    pid_file.write(str(os.getpid()))
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(4, 4).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(10_000):
    model(torch.randn(2, 4, device=device)).sum().backward()
    optimizer.step()
    time.sleep(0.05)
