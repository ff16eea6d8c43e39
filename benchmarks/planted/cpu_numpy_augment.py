"""PLANTED (CPU_RESIDENCY): per-sample numpy augmentation in the training loop, on the host.

Sizing on an H200: 256 images of 3x144x144 uint8 a step; per image a random crop to 128, a flip,
a brightness/contrast jitter and normalization in float32 numpy, ~0.2-0.3 ms each: ~60 ms of
single-threaded host work a step. The conv net is ~2-4 ms of GPU time at batch 256, 128x128,
TF32. The GPU idles >90% of the step while the host computes.
Fix (twin): send the uint8 batch to the GPU (12 MB) and augment the whole batch there with
batched torch ops (a gather for the crops, torch.where for the flips): well under 1 ms.
"""

import _planted
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
batch = _planted.pick(device, 256, 8)
STORED, CROP = 144, 128
MEAN, STD = 0.45, 0.225

rng = np.random.default_rng(0)
dataset = rng.integers(0, 256, size=(4 * batch, 3, STORED, STORED), dtype=np.uint8)
labels_all = torch.from_numpy(rng.integers(0, 10, size=4 * batch)).to(device)


def conv_block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(inplace=True), nn.MaxPool2d(2))


model = nn.Sequential(conv_block(3, 32), conv_block(32, 64), conv_block(64, 128),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

timer = _planted.Timer(device)
for step in range(args.steps):
    first = (step * batch) % len(dataset)
    raw = dataset[first : first + batch]
    tops, lefts = rng.integers(0, STORED - CROP, size=(2, batch))
    flips = rng.random(batch) < 0.5
    gains = rng.uniform(0.8, 1.2, size=batch).astype(np.float32)
    # PLANTED: a Python loop of numpy work per sample, on the host, every step
    augmented = np.empty((batch, 3, CROP, CROP), dtype=np.float32)
    for i in range(batch):
        image = raw[i, :, tops[i] : tops[i] + CROP, lefts[i] : lefts[i] + CROP].astype(np.float32)
        if flips[i]:
            image = image[:, :, ::-1]
        image = image * (gains[i] / 255.0)
        augmented[i] = (image - MEAN) / STD
    images = torch.from_numpy(augmented).to(device)
    labels = labels_all[first : first + batch]
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
timer.report("cpu_numpy_augment", args.steps)
