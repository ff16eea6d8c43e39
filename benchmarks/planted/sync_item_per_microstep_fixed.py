"""FIXED twin of sync_item_per_microstep.py: the running loss stays on the device.

Sizes as in sync_item_per_microstep.py (H200).
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
    running_loss = torch.zeros((), device=device)
    for micro in range(MICRO_STEPS):
        index = sampler.next_indices(device)
        loss = F.cross_entropy(model(features[index]), targets[index]) / MICRO_STEPS
        loss.backward()
        running_loss += loss.detach()  # FIXED: no host wait; read once per log interval
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % LOG_EVERY == 0:
        print(f"step {step} loss {running_loss.item():.4f}")
timer.report("sync_item_per_microstep_fixed", args.steps)
