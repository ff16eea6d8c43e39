"""Evaluation over a DataLoader with no optimizer: a map-style dataset that decodes and augments each
sample on the CPU (uint8 -> float, random crop, flip, normalize), batch 64, workers from --workers
(default 0, in the main process), torchvision ResNet-18 in eval mode, accuracy accumulated on the GPU."""

import _timing
import torch
import torchvision
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    def __init__(self, count: int) -> None:
        self.count = count
        self.raw = torch.randint(0, 256, (16, 3, 256, 256), dtype=torch.uint8)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.raw[index % 16].float().div_(255)
        top, left = torch.randint(0, 32, (2,)).tolist()
        image = image[:, top:top + 224, left:left + 224]
        if index % 2:
            image = image.flip(2)
        image = (image - 0.45) / 0.225
        return image, index % 1000


args = _timing.parse_args(__doc__, default_iters=40, extra=[("--workers", {"type": int, "default": 0})])
loader = DataLoader(SyntheticImages(64 * (args.iters + 2)), batch_size=64, num_workers=args.workers)
model = torchvision.models.resnet18().to(args.device).eval()
correct = torch.zeros((), device=args.device)
clock = _timing.IterClock(args.device, args.skip)
with torch.no_grad():
    for images, labels in loader:
        clock.tick()
        images, labels = images.to(args.device), labels.to(args.device)
        correct += (model(images).argmax(1) == labels).sum()
        if clock.count == args.iters:
            break
clock.report("dataloader_eval_loop")
