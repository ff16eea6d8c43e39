"""PLANTED (SYNCHRONIZATION): `torch.cuda.synchronize()` after forward, backward and optimizer
step, to time each phase with the wall clock.

Each step first draws its samples on the host (weighted sampling, ~3-4 ms of numpy on the H200
box), then trains 8 Linear(2048, 2048) layers at batch 8192 in TF32: 3 x 2 x 8192 x 2048^2 x 8 =
1.6 TFLOP, ~6.5 ms on an H200. Left alone the host samples step i+1 while the GPU computes step i,
and the GPU sets the pace. Four device-wide syncs a step make the host wait until the GPU is done,
so the sampling runs while the GPU sits idle: host and GPU time add up, ~35% of the step.
Fix (twin): time the phases with CUDA events read once per log interval; no synchronize.
"""

import itertools
import time

import _planted
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
torch.backends.cuda.matmul.allow_tf32 = True
width = _planted.pick(device, 2048, 64)
batch = _planted.pick(device, 8192, 16)
samples = _planted.pick(device, 250_000, 1_000)
LOG_EVERY = 50

model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(8)],
                      nn.Linear(width, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
features = torch.randn(samples, width, device=device)
targets = torch.randint(0, 10, (samples,), device=device)
sampler = _planted.WeightedSampler(samples, batch)


def clock() -> float:
    _planted.synchronize(device)  # PLANTED: a device-wide sync, so the wall clock means something
    return time.perf_counter()


def elapsed_ms(marks: list) -> list[float]:
    return [1000 * (end - begin) for begin, end in itertools.pairwise(marks)]


timer = _planted.Timer(device)
for step in range(args.steps):
    index = sampler.next_indices(device)
    marks = [clock()]
    loss = F.cross_entropy(model(features[index]), targets[index])
    marks.append(clock())
    loss.backward()
    marks.append(clock())
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    marks.append(clock())
    if step % LOG_EVERY == 0:
        forward, backward, update = elapsed_ms(marks)
        print(f"step {step} forward {forward:.2f} ms backward {backward:.2f} ms optimizer {update:.2f} ms")
timer.report("sync_cuda_synchronize", args.steps)
