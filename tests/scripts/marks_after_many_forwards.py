"""Batch-1 requests through a small model, 32 a marked step (the shape of benchmarks/planted/
launch_batch1_deep_mlp.py): the model's forward repeats at the top level many times before the loop's first
hybrid.mark_step(), so a detector that decided on the repeated forward would take one request for a step."""

import sys
import time

import torch
from torch import nn

import hybrid

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 12
model = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 32)).eval()
requests = torch.randn(32, 32)
with torch.inference_mode():
    for _ in range(iters):
        outputs = []
        for i in range(32):
            outputs.append(model(requests[i : i + 1]))
            time.sleep(0.002)  # a request's host work: 32 make a ~70 ms step
        torch.cat(outputs)
        hybrid.mark_step()
print("finished all iterations")
