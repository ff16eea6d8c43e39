"""A deep narrow conv net (40 blocks of 3x3 conv 32->32 + BatchNorm + ReLU) at batch 1 on 64x64 images,
eval mode: thousands of tiny kernels per forward, so the host's launch rate sets the pace."""

import _timing
import torch
from torch import nn

args = _timing.parse_args(__doc__, default_iters=60)
blocks = [nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU()) for _ in range(40)]
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(32, 10)).to(args.device).eval()
image = torch.randn(1, 3, 64, 64, device=args.device)
clock = _timing.IterClock(args.device, args.skip)
with torch.no_grad():
    for _ in range(args.iters):
        clock.tick()
        scores = model(image).softmax(1)
clock.report("deep_narrow_conv_b1")
