"""PLANTED (KERNEL_LAUNCH): batch-1 inference, one request at a time, through a narrow deep MLP.

Sizing on an H200: each step serves 64 requests; each request runs 32 x (Linear(256, 256) + GELU)
= 64 kernels of ~2-3 us of GPU work on a 256-wide vector, so 4,096 launches a step at ~5-10 us
each of Python + launch overhead (20-40 ms) against well under 1 ms of GPU work: the GPU is idle
>90% of the time, waiting for the next launch.
Fix (twin): batch the 64 requests into one (64, 256) tensor: 64 launches a step, same results.
"""

import _planted
import torch
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
torch.backends.cuda.matmul.allow_tf32 = True
WIDTH, DEPTH = 256, 32
requests_per_step = _planted.pick(device, 64, 8)

layers = []
for _ in range(DEPTH):
    layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
model = nn.Sequential(*layers).to(device).eval()
requests = torch.randn(requests_per_step, WIDTH, device=device)

timer = _planted.Timer(device)
with torch.inference_mode():
    for step in range(args.steps):
        # PLANTED: one forward per request, batch size 1
        outputs = [model(requests[i : i + 1]) for i in range(requests_per_step)]
        scores = torch.cat(outputs)
        _planted.mark_step()
timer.report("launch_batch1_deep_mlp", args.steps)
