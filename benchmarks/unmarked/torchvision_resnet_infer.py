"""torchvision ResNet-50 inference at batch 128 with PyTorch's default precision settings (no
autocast, TF32 as the defaults leave it), inference mode. Unmarked."""

import _timing
import torch
import torchvision

args = _timing.parse_args(__doc__, default_iters=50)
model = torchvision.models.resnet50().to(args.device).eval()
images = torch.randn(128, 3, 224, 224, device=args.device)
clock = _timing.IterClock(args.device, args.skip)
with torch.inference_mode():
    for _ in range(args.iters):
        clock.tick()
        top5 = model(images).topk(5, dim=1).indices
clock.report("torchvision_resnet_infer")
