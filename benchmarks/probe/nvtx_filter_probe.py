"""Checks on the GPU machine how ncu's NVTX include filter matches our `hybrid` domain push/pop ranges.
Run: ncu --clock-control none --nvtx --nvtx-include 'hybrid@step 1/'
    python benchmarks/probe/nvtx_filter_probe.py"""

import nvtx
import torch

dom = nvtx.get_domain("hybrid")
x = torch.randn(1024, 1024, device="cuda")
for i in range(3):
    dom.push_range(message=f"step {i}")
    y = x * (i + 1)
    z = y.sum()
    dom.pop_range()
torch.cuda.synchronize()
print("done", float(z))
