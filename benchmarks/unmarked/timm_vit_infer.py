"""ViT-S/16 inference (timm, random init; torchvision's ViT-B/16 where timm is missing), batch 64,
bf16 autocast, inference mode. Unmarked: a plain nn inference loop."""

import _timing
import torch

args = _timing.parse_args(__doc__, default_iters=60)
try:
    import timm

    model, source = timm.create_model("vit_small_patch16_224", pretrained=False), "timm vit_small_patch16_224"
except ImportError:
    import torchvision

    model, source = torchvision.models.vit_b_16(), "torchvision vit_b_16"
print(f"model: {source}", flush=True)
model = model.to(args.device).eval()
images = torch.randn(64, 3, 224, 224, device=args.device)
clock = _timing.IterClock(args.device, args.skip)
with torch.inference_mode(), torch.autocast(device_type=torch.device(args.device).type, dtype=torch.bfloat16):
    for _ in range(args.iters):
        clock.tick()
        logits = model(images)
clock.report("timm_vit_infer")
