"""A training loop whose every 4th iteration runs a full garbage collection over a large object graph
(100k lists of dicts kept alive), as a loop that calls gc.collect() for its memory log does."""

import gc

import torch

model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
kept = [[{} for _ in range(4)] for _ in range(100_000)]
for i in range(40):
    if i % 4 == 3:
        gc.collect()
    optimizer.zero_grad()
    model(torch.randn(32, 64)).sum().backward()
    optimizer.step()
