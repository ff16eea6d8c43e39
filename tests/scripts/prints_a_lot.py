"""Prints about 40 KB per training step (a chatty script): its output must never block it."""

import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(40):
    for _ in range(200):
        print(f"step {step} " + "x" * 200)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
