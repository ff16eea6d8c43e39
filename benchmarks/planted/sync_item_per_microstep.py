"""PLANTED (SYNCHRONIZATION): `loss.item()` after every micro-step, for a running-loss log.

Each micro-step first draws its samples on the host (weighted sampling, ~3-4 ms of numpy on the
H200 box), then runs forward and backward of 8 Linear(2048, 2048) layers at micro-batch 8192 in
TF32: 3 x 2 x 8192 x 2048^2 x 8 = 1.6 TFLOP, ~6.5 ms on an H200 (3.3 ms measured at micro-batch
4096). Left alone the host samples micro-step i+1 while the GPU computes micro-step i, and the GPU
sets the pace. `.item()` makes the host wait for the GPU 4 times a step, so the sampling runs while
the GPU sits idle: host and GPU time add up, ~35-40% of the step.
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
micro_batch = _planted.pick(device, 8192, 8)
samples = _planted.pick(device, 250_000, 1_000)
MICRO_STEPS = 4  # gradient accumulation
LOG_EVERY = 50

model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(8)],
                      nn.Linear(width, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
features = torch.randn(samples, width, device=device)
targets = torch.randint(0, 10, (samples,), device=device)
sampler = _planted.WeightedSampler(samples, micro_batch)

timer = _planted.Timer(device)
for step in range(args.steps):
    running_loss = 0.0
    for micro in range(MICRO_STEPS):
        index = sampler.next_indices(device)
        loss = F.cross_entropy(model(features[index]), targets[index]) / MICRO_STEPS
        loss.backward()
        running_loss += loss.item()  # PLANTED: the host waits for the GPU after every micro-step
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % LOG_EVERY == 0:
        print(f"step {step} loss {running_loss:.4f}")
timer.report("sync_item_per_microstep", args.steps)
