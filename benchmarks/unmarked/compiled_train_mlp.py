"""A torch.compile'd (inductor, default mode) training loop: a 6-block residual MLP (d 1024, hidden 4096,
LayerNorm, GELU) on random batches of 64 x 128 tokens, AdamW, bf16 autocast. Compiling its forward and
backward graphs is most of a plain run; steps come from the optimizer, nothing is marked."""

import _timing
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


args = _timing.parse_args(__doc__, default_iters=60)
device = torch.device(args.device)
model = torch.compile(nn.Sequential(*[Block(1024) for _ in range(6)], nn.Linear(1024, 1)).to(device))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
clock = _timing.IterClock(args.device, args.skip, unit="step")
for _ in range(args.iters):
    clock.tick()
    x = torch.randn(64, 128, 1024, device=device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = model(x).float().square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
clock.report("compiled_train_mlp")
