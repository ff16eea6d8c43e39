"""FIXED twin of cpu_tensors_then_moved.py: noise and timesteps are drawn on the GPU.

Sizing on an H200: noise for 128 latents of 4x96x96 is 4.7 M floats. torch.randn on the host
takes ~25-35 ms for that (measured on a 2-core CPU box), plus a 19 MB
pageable copy (~1-2 ms). The denoiser (4 convs of 128 channels at 96x96, batch 128) is ~1.7 TFLOP
a step with backward, ~5 ms of GPU time with TF32. The host RNG dominates the step.
Fix (twin): draw noise and timesteps directly on the GPU (`device=device`): one ~10 us kernel.
"""

import _planted
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
batch = _planted.pick(device, 128, 2)
side = _planted.pick(device, 96, 16)
CHANNELS, TIMESTEPS = 4, 1000

denoiser = nn.Sequential(nn.Conv2d(CHANNELS + 1, 128, 3, padding=1), nn.SiLU(),
                         nn.Conv2d(128, 128, 3, padding=1), nn.SiLU(),
                         nn.Conv2d(128, 128, 3, padding=1), nn.SiLU(),
                         nn.Conv2d(128, CHANNELS, 3, padding=1)).to(device)
optimizer = torch.optim.AdamW(denoiser.parameters(), lr=1e-4)
latents = torch.randn(batch, CHANNELS, side, side, device=device)
alphas = torch.linspace(0.999, 0.01, TIMESTEPS, device=device)

timer = _planted.Timer(device)
for step in range(args.steps):
    # FIXED: drawn where they are used, no host work and no copy
    noise = torch.randn(batch, CHANNELS, side, side, device=device)
    t = torch.randint(0, TIMESTEPS, (batch,), device=device)
    alpha = alphas[t][:, None, None, None]
    noisy = alpha.sqrt() * latents + (1 - alpha).sqrt() * noise
    t_plane = (t.float() / TIMESTEPS)[:, None, None, None].expand(batch, 1, side, side)
    loss = F.mse_loss(denoiser(torch.cat([noisy, t_plane], dim=1)), noise)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
timer.report("cpu_tensors_then_moved_fixed", args.steps)
