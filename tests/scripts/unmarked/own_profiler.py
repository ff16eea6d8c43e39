"""A script that runs its own torch.profiler with a schedule and calls prof.step() once per iteration:
those calls are its step marks."""

import torch

model = torch.nn.Linear(32, 32)
x = torch.randn(8, 32)
schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule) as prof:
    for _ in range(40):
        model(x).sum()
        prof.step()
