"""A few training steps of a small residual network built like torchvision's ResNet blocks
(conv, batch norm, ReLU(inplace=True), identity shortcut); records the module-range name hybrid
gave one inner convolution, to the file named by argv[1]."""

import json
import sys

import torch
from torch import nn

from hybrid.inject.stepping import MODULE_NAME_ATTR


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x  # in place on a module output, as in ResNet
        return self.relu(out)


model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True),
                      nn.Sequential(Block(8), Block(8)), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
images, labels = torch.randn(2, 3, 16, 16), torch.tensor([1, 2])
try:
    for _ in range(10):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
finally:
    with open(sys.argv[1], "w") as f:
        json.dump({"conv1_name": model[2][0].conv1.__dict__.get(MODULE_NAME_ATTR)}, f)
