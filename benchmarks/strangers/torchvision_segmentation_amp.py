"""A torchvision semantic-segmentation training loop in the shape of torchvision's reference recipe:
DeepLabV3-MobileNetV3 (random init, no download) with its auxiliary head, 21 classes, random 3x480x480 crops,
fp16 autocast with a GradScaler, SGD with momentum and a polynomial learning-rate schedule."""

import torch
import torchvision
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"


class RandomCrops(Dataset):
    def __len__(self) -> int:
        return 2048

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, 480, 480, generator=generator)
        target = torch.randint(0, 21, (480, 480), generator=generator)
        target[:8] = 255
        return image, target


loader = DataLoader(RandomCrops(), batch_size=8, shuffle=True, num_workers=4, pin_memory=True, drop_last=True)
model = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
    weights=None, weights_backbone=None, num_classes=21, aux_loss=True).to(device)
params = [{"params": [p for p in model.backbone.parameters() if p.requires_grad]},
          {"params": [p for p in model.classifier.parameters() if p.requires_grad]},
          {"params": [p for p in model.aux_classifier.parameters() if p.requires_grad], "lr": 0.02 * 10}]
optimizer = torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=1e-4)
iters = 3 * len(loader)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: (1 - it / iters) ** 0.9)
scaler = torch.amp.GradScaler(device)
criterion = torch.nn.CrossEntropyLoss(ignore_index=255)
model.train()
for epoch in range(3):
    for image, target in loader:
        image, target = image.to(device, non_blocking=True), target.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.float16):
            output = model(image)
            loss = criterion(output["out"], target) + 0.5 * criterion(output["aux"], target)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
    print("epoch", epoch, loss.item())
