"""Takes one optimizer step, then exits with status 7 from a finally-protected block."""

import sys

import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(2, 4)).sum().backward()
optimizer.step()
try:
    sys.exit(7)
finally:
    print("finally ran")
