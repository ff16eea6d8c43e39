"""PLANTED (KERNEL_LAUNCH): a per-sample weighted loss computed in a Python loop over the batch.

Sizing on an H200: batch 512, each sample costs ~5 tiny kernels forward (slice, log-softmax,
gather, multiply, stack) and ~6 backward, so ~5,500 launches a step at ~5-10 us each = 30-55 ms
of host launch time, while each kernel touches a few KB and the MLP's real work (3 Linear
layers of 1024 at batch 512, ~20 GFLOP with backward) is ~0.1 ms of GPU time. The GPU idles
>95% of the step between tiny kernels.
Fix (twin): one vectorized `cross_entropy(..., reduction="none")` over the batch.
"""

import _planted
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
torch.backends.cuda.matmul.allow_tf32 = True
batch = _planted.pick(device, 512, 16)
width = _planted.pick(device, 1024, 64)
CLASSES = 100

model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, CLASSES)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
inputs = torch.randn(batch, width, device=device)
labels = torch.randint(0, CLASSES, (batch,), device=device)
sample_weights = torch.rand(batch, device=device)  # e.g. class-balancing weights

timer = _planted.Timer(device)
for step in range(args.steps):
    logits = model(inputs)
    # PLANTED: one loss per sample, each a handful of tiny kernels, launched from Python
    per_sample = [F.cross_entropy(logits[i : i + 1], labels[i : i + 1]) * sample_weights[i]
                  for i in range(batch)]
    loss = torch.stack(per_sample).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
timer.report("launch_per_sample_loss", args.steps)
