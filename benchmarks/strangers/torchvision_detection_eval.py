"""A detection evaluation as a torchvision user writes it: Faster R-CNN (MobileNetV3-FPN, random weights:
nothing can be downloaded on the GPU machine) in eval mode, inputs built with a list comprehension of CUDA
tensors before the loop, one forward per batch of four images."""

import torch
import torchvision

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None)
model = model.to(device).eval()
images = [torch.rand(3, 480, 640, device=device) for _ in range(4)]
detections = 0
with torch.no_grad():
    for it in range(40):
        outputs = model(images)
        detections += sum(len(o["boxes"]) for o in outputs)
print("detections", detections)
