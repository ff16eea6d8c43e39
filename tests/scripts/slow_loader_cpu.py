"""A training loop fed by a num_workers=0 DataLoader whose items take ~2 ms each to build (a Python loop over
the pixels of a small image, as hand-written augmentation does): with 16 items a batch, most of each step is
spent fetching the batch in the training process. No hybrid import; steps are found by the optimizer hook."""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--item-ms", type=float, default=2.0)
args = parser.parse_args()


class SlowItems(Dataset):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = time.perf_counter() + args.item_ms / 1e3
        pixels = [0.0] * 192
        while time.perf_counter() < end:  # per-item Python work on the host, as hand-written augmentation is
            pixels = [p + 0.001 for p in pixels]
        return torch.tensor(pixels), torch.tensor(index % 10)


loader = DataLoader(SlowItems(), batch_size=16, num_workers=0)
model = torch.nn.Sequential(torch.nn.Linear(192, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (images, labels) in enumerate(loader):
    if step >= args.iters:
        break
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()
