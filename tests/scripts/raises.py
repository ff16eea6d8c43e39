"""Fails after two optimizer steps, with an error whose text the test looks for."""

import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(2):
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
raise ValueError("planted failure after two steps")
