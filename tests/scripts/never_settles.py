"""Eight optimizer steps, each 1.5x as long as the one before (sleeping 5 ms x 1.5^i): step times never
settle within 10%, and the script ends before warmup's settling rule would stop waiting."""

import time

import torch

model = torch.nn.Linear(16, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(8):
    optimizer.zero_grad()
    model(torch.randn(4, 16)).sum().backward()
    time.sleep(0.005 * 1.5**i)
    optimizer.step()
