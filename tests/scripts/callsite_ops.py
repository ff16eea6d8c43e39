"""A CPU training loop whose host-side ops sit on marked lines (tests/test_callsites.py)."""

import torch

model = torch.nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0.0
for step in range(20):
    noise = torch.randn(4, 8).to("cpu")  # CALLSITE: randn
    loss = model(noise).sum()
    loss.backward()
    total += loss.item()  # CALLSITE: item
    optimizer.step()
    optimizer.zero_grad()
