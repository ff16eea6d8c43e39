"""A torch.compile'd (inductor) MLP in an inference loop on the CPU, steps found by hybrid.mark_step():
the compile the passes of one run share through their compile cache. Usage: compiled_steps.py ITERATIONS"""

import sys

import torch
from torch import nn

import hybrid

model = torch.compile(nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8)).eval())
x = torch.randn(4, 32)
with torch.no_grad():
    for _ in range(int(sys.argv[1])):
        model(x)
        hybrid.mark_step()
