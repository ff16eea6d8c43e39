"""A training loop whose every 4th iteration runs a full garbage collection over a large object graph
(100k lists of dicts kept alive), as a loop that calls gc.collect() for its memory log does. On the GPU
when there is one: the device then waits for the collector (a planted host-side cause, fixed by
gc.freeze() after setup)."""

import gc
import sys

import torch

iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 40

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(64, 64).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
kept = [[{} for _ in range(4)] for _ in range(100_000)]
for i in range(iterations):
    if i % 4 == 3:
        gc.collect()
    optimizer.zero_grad()
    model(torch.randn(32, 64, device=device)).sum().backward()
    optimizer.step()
