"""FIXED twin of sync_cuda_synchronize.py: phases timed with CUDA events, read once per log
interval, so the host never waits inside a step (on the CPU there is nothing to time, so the
phase timings are skipped there).
"""

import _planted
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
torch.backends.cuda.matmul.allow_tf32 = True
width = _planted.pick(device, 2048, 64)
batch = _planted.pick(device, 1024, 16)
LOG_EVERY = 50

model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(8)],
                      nn.Linear(width, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
inputs = torch.randn(batch, width, device=device)
labels = torch.randint(0, 10, (batch,), device=device)

use_events = device.type == "cuda"
phase_ms = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
timer = _planted.Timer(device)
for step in range(args.steps):
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)] if use_events else None
    if events:
        events[0].record()
    loss = F.cross_entropy(model(inputs), labels)
    if events:
        events[1].record()  # FIXED: an event instead of a device-wide sync
    loss.backward()
    if events:
        events[2].record()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if events:
        events[3].record()
    if events and step % LOG_EVERY == 0:
        events[3].synchronize()  # one wait per LOG_EVERY steps, not one per phase
        for name, begin, end in zip(phase_ms, events, events[1:]):
            phase_ms[name] = begin.elapsed_time(end)
        print(f"step {step} " + " ".join(f"{k} {v:.2f} ms" for k, v in phase_ms.items()))
timer.report("sync_cuda_synchronize_fixed", args.steps)
