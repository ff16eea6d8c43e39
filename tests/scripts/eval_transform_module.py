"""An evaluation loop as torchvision users write it, torch only: the dataset applies an nn.Module transform to
each item (as torchvision's Resize or Normalize are), a num_workers=0 DataLoader batches 32 items, and a
model under no_grad scores each batch. The loop ends after its 24 batches. No optimizer, no hybrid import: the
step is found from the script's own loop, not from the transform's 32 calls a batch."""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Standardize(torch.nn.Module):
    def forward(self, item: torch.Tensor) -> torch.Tensor:
        time.sleep(0.001)  # decoding the item, which a real transform pipeline spends here
        return (item - item.mean()) / (item.std() + 1e-6)


class Items(Dataset):
    def __init__(self) -> None:
        self.transform = Standardize()

    def __len__(self) -> int:
        return 24 * 32

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(torch.arange(256, dtype=torch.float32) * (index % 5)), index % 10


loader = DataLoader(Items(), batch_size=32)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).eval()
correct = 0
with torch.no_grad():
    for inputs, labels in loader:
        correct += int((model(inputs).argmax(1) == labels).sum())
print("accuracy", correct / len(loader.dataset))
