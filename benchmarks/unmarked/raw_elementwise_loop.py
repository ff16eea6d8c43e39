"""A raw tensor loop: a chain of eight elementwise ops on a 64M-element fp32 tensor per iteration,
no nn.Module, no optimizer. Each op reads and writes the whole tensor (eager: one kernel per op)."""

import _timing
import torch

args = _timing.parse_args(__doc__, default_iters=60)
n = 64 * 2**20 if args.device == "cuda" else 2**16
x = torch.randn(n, device=args.device)
clock = _timing.IterClock(args.device, args.skip)
for _ in range(args.iters):
    clock.tick()
    y = x * 1.0001
    y = y + 0.5
    y = torch.sin(y)
    y = y * y
    y = torch.exp(-y)
    y = y - 0.25
    y = torch.tanh(y)
    x = y + x * 0.5
clock.report("raw_elementwise_loop")
