"""FIXED twin of sync_cuda_synchronize.py: phases are timed with CUDA events, read once per log interval.

Sizes as in sync_cuda_synchronize.py (H200).
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


def clock():
    if device.type != "cuda":  # nothing runs asynchronously on the CPU
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)  # FIXED: marks the stream, the host does not wait
    event.record()
    return event


def elapsed_ms(marks: list) -> list[float]:
    if device.type != "cuda":
        return [1000 * (end - begin) for begin, end in itertools.pairwise(marks)]
    marks[-1].synchronize()  # one wait per LOG_EVERY steps instead of four per step
    return [begin.elapsed_time(end) for begin, end in itertools.pairwise(marks)]


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
timer.report("sync_cuda_synchronize_fixed", args.steps)
