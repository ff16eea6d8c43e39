"""A torchvision training loop as a stranger writes it, for a CPU-only machine: resnet18 on FakeData 128x128
images through random crops and flips in a num_workers=0 DataLoader, batch 32, SGD. Its transforms run on
the same cores as the model's own compute. No hybrid import."""

import torch
import torchvision
from torchvision import transforms as T

augment = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()]
tf = T.Compose([*augment, T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])
dataset = torchvision.datasets.FakeData(size=4000, image_size=(3, 128, 128), num_classes=10, transform=tf)
loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True, num_workers=0)
model = torchvision.models.resnet18(num_classes=10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for i, (images, labels) in enumerate(loader):
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if i == 60:
        break
