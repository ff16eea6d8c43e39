"""A training loop fed by a num_workers=0 DataLoader whose items each wait ~2 ms (a read from slow storage):
with 16 items a batch, most of each step waits for the batch in the training process. The items are the same
in every run (their values do not depend on timing), so a run with DataLoader workers computes the same losses,
unless --augment adds random noise to them.
No hybrid import; steps are found by the optimizer hook."""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--item-ms", type=float, default=2.0)
# Items that compute for --item-ms (decoding, augmenting) instead of waiting for storage.
parser.add_argument("--spin", action="store_true")
# Items with random noise added, as random augmentation does.
parser.add_argument("--augment", action="store_true")
# Items that can only be read in the training process (a handle that does not survive a fork, say).
parser.add_argument("--main-process-only", action="store_true")
args = parser.parse_args()


class WaitingItems(Dataset):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if args.main_process_only and torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("this dataset can only be read in the main process")
        if args.spin:
            end = time.perf_counter() + args.item_ms / 1e3
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(args.item_ms / 1e3)
        features = torch.arange(192, dtype=torch.float32) * (index % 7) / 192
        if args.augment:
            features = features * 100.0 * torch.rand(()) + torch.randn(192)
        return features, torch.tensor(index % 10)


loader = DataLoader(WaitingItems(), batch_size=16, num_workers=0)
model = torch.nn.Sequential(torch.nn.Linear(192, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (images, labels) in enumerate(loader):
    if step >= args.iters:
        break
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()
