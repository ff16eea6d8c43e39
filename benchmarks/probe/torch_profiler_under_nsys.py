"""Can torch.profiler record a window in a process nsys was launched on, while nsys's capture range is closed?
If so, the torch pass and the nsys pass can share one process (issue 21: one process start-up less, ~10 s of
a resnet50 diagnosis). Prints, per window, the CUDA kernels torch.profiler recorded and the step time.

Run on the GPU machine:
  nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --capture-range=cudaProfilerApi \
      --capture-range-end=stop --export none -o OUT python benchmarks/probe/torch_profiler_under_nsys.py
  nsys export --type sqlite -o OUT.sqlite OUT.nsys-rep   # then count CUPTI_ACTIVITY_KIND_KERNEL rows
and once without nsys, for the reference counts."""

from __future__ import annotations

import json
import time

import torch
from torch.profiler import ProfilerActivity, profile

model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).cuda()
x = torch.randn(256, 1024, device="cuda")


def step() -> None:
    model(x).sum().backward()


def timed(n: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e3


def torch_window(label: str) -> dict:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        ms = timed(5)
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"window": label, "cuda_events": len(kernels), "cpu_events": len(prof.events()), "step_ms": ms}


timed(10)  # warmup
rows = [{"window": "plain", "step_ms": timed(10)}]
rows.append(torch_window("torch.profiler before the nsys range"))
torch.cuda.cudart().cudaProfilerStart()
rows.append({"window": "nsys range", "step_ms": timed(5)})
torch.cuda.cudart().cudaProfilerStop()
rows.append(torch_window("torch.profiler after the nsys range"))
rows.append({"window": "plain after both", "step_ms": timed(10)})
print(json.dumps(rows, indent=1))
