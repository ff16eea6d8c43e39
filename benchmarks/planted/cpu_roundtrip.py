"""PLANTED (CPU_RESIDENCY): hard-example mining done in numpy: the logits go to the host
(`.cpu()`), are ranked there, and the selection comes back (`.to(device)`) every step.

Sizing on an H200: logits for 8192 samples x 1000 classes are 32 MB: a DtoH copy (~3 ms pageable)
that also waits for the forward pass, then a numpy softmax + per-row sort of 8.2 M values
(~130 ms measured on a 2-core CPU box) and a small HtoD copy back. The MLP is ~0.2 TFLOP a step with
backward, ~1 ms of GPU time with TF32. The host-side numpy work is >95% of the step.
Fix (twin): the same mining on the GPU (softmax, topk, ranking) with torch ops on the device.
"""

import _planted
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
torch.backends.cuda.matmul.allow_tf32 = True
batch = _planted.pick(device, 8192, 64)
width = _planted.pick(device, 1024, 64)
CLASSES, HARD_FRACTION, TOP_K = 1000, 0.25, 5

model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, CLASSES)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
inputs = torch.randn(batch, width, device=device)
labels = torch.randint(0, CLASSES, (batch,), device=device)
keep = int(batch * HARD_FRACTION)

timer = _planted.Timer(device)
for step in range(args.steps):
    logits = model(inputs)
    # PLANTED: a round trip through host memory and numpy to pick the hard examples
    host_logits = logits.detach().cpu().numpy()
    host_labels = labels.cpu().numpy()
    probs = np.exp(host_logits - host_logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    top = np.sort(probs, axis=1)[:, -TOP_K:]  # confidence of the top-k guesses
    hardness = top.sum(axis=1) - probs[np.arange(batch), host_labels]
    hard = torch.from_numpy(np.argsort(-hardness)[:keep].copy()).to(device)
    loss = F.cross_entropy(logits[hard], labels[hard])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
timer.report("cpu_roundtrip", args.steps)
