"""Two phases in one script: a training phase with an optimizer, then an evaluation loop. The optimizer
hook is the stronger source, so the steps are the training steps."""

import torch

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 64)
for _ in range(40):
    optimizer.zero_grad()
    model(data).square().mean().backward()
    optimizer.step()
with torch.no_grad():
    for _ in range(40):
        model(data)
print("finished both phases")
