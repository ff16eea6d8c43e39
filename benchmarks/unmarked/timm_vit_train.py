"""ViT-S/16 training (timm, random init; torchvision ViT-B/16 where timm is missing), batch 64,
bf16 autocast, AdamW: the precision issue's ViT case, with steps from the optimizer."""

import _timing
import torch

args = _timing.parse_args(__doc__, default_iters=60)
try:
    import timm

    model = timm.create_model("vit_small_patch16_224", pretrained=False)
except ImportError:
    import torchvision

    model = torchvision.models.vit_b_16()
model = model.to(args.device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
images = torch.randn(64, 3, 224, 224, device=args.device)
labels = torch.randint(0, 1000, (64,), device=args.device)
clock = _timing.IterClock(args.device, args.skip, unit="step")
for _ in range(args.iters):
    clock.tick()
    with torch.autocast(device_type=torch.device(args.device).type, dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
clock.report("timm_vit_train")
