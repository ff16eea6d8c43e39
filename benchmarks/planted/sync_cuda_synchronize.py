"""PLANTED (SYNCHRONIZATION): `torch.cuda.synchronize()` after forward, backward and optimizer
step, to time each phase with the wall clock.

Sizing on an H200: 8 Linear(2048, 2048) layers at batch 1024, TF32: ~3 x 2 x 1024 x 2048^2 x 8 =
206 GFLOP a step, ~0.6 ms of GPU time, against ~120 kernel launches, ~0.6-1 ms of Python launch
time. Three device-wide syncs a step stop the host from queueing the next phase while the GPU
works, so host and GPU time add up instead of overlapping: ~40-50% of the step is sync wait.
Fix (twin): time the phases with CUDA events read once per log interval; no synchronize.
"""

import time

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

phase_ms = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
timer = _planted.Timer(device)
for step in range(args.steps):
    start = time.perf_counter()
    loss = F.cross_entropy(model(inputs), labels)
    _planted.synchronize(device)  # PLANTED: a device-wide sync to read the wall clock
    after_forward = time.perf_counter()
    loss.backward()
    _planted.synchronize(device)  # PLANTED
    after_backward = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _planted.synchronize(device)  # PLANTED
    end = time.perf_counter()
    phase_ms["forward"] += 1000 * (after_forward - start)
    phase_ms["backward"] += 1000 * (after_backward - after_forward)
    phase_ms["optimizer"] += 1000 * (end - after_backward)
    if step % LOG_EVERY == 0:
        print(f"step {step} " + " ".join(f"{k} {v / (step + 1):.2f} ms" for k, v in phase_ms.items()))
timer.report("sync_cuda_synchronize", args.steps)
