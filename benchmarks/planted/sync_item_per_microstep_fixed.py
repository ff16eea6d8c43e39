"""FIXED twin of sync_item_per_microstep.py: the running loss stays on the device.

Sizing on an H200: 8 Linear(2048, 2048) layers, micro-batch 512, TF32. One micro-step is
3 x 2 x 512 x 2048^2 x 8 = 103 GFLOP, ~0.3 ms of GPU time at ~350 TFLOP/s achieved TF32, while
Python launches ~50 kernels for it at ~5-10 us each, ~0.3-0.5 ms of host time. Left alone the host
runs ahead and both overlap; `.item()` makes the host wait for the GPU 4 times a step, so a step
costs host + GPU time instead of the larger of the two: ~40-50% of the step is sync wait.
Fix (twin): accumulate the loss on the device and read it once per log interval.
"""

import _planted
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
torch.backends.cuda.matmul.allow_tf32 = True
width = _planted.pick(device, 2048, 64)
micro_batch = _planted.pick(device, 512, 8)
MICRO_STEPS = 4  # gradient accumulation
LOG_EVERY = 50

model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(8)],
                      nn.Linear(width, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
inputs = torch.randn(MICRO_STEPS, micro_batch, width, device=device)
labels = torch.randint(0, 10, (MICRO_STEPS, micro_batch), device=device)

timer = _planted.Timer(device)
for step in range(args.steps):
    running_loss = torch.zeros((), device=device)
    for micro in range(MICRO_STEPS):
        loss = F.cross_entropy(model(inputs[micro]), labels[micro]) / MICRO_STEPS
        loss.backward()
        running_loss += loss.detach()  # FIXED: no host wait; read once per log interval
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % LOG_EVERY == 0:
        print(f"step {step} loss {running_loss.item():.4f}")
timer.report("sync_item_per_microstep_fixed", args.steps)
