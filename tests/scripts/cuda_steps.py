"""A CUDA workload with a known shape per step, for the GPU tests: one fp16 NxN matmul in an
nn.Linear-free module, a `.item()` (pinned 2-byte DtoH + stream sync) and a `.cpu()` of the NxN
result into pageable memory (a blocking DtoH copy), then hybrid.mark_step().
Usage: cuda_steps.py ITERATIONS [N]"""

import sys

import torch
from torch import nn

import hybrid


class Square(nn.Module):
    def forward(self, x):
        return x @ x


iterations = int(sys.argv[1])
size = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
model = Square()
x = torch.randn(size, size, device="cuda", dtype=torch.float16)
hybrid.set_batch_size(1)
for _ in range(iterations):
    y = model(x)
    total = y.float().sum().item()
    host = y.cpu()
    hybrid.mark_step()
print("finished", total, host.shape)
