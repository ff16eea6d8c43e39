"""Nested loops: epochs x batches of bf16 4096^3 GEMMs with a bias and a GELU, no nn.Module and no
optimizer (a benchmark loop). The unit a user means is one inner iteration."""

import _timing
import torch

args = _timing.parse_args(__doc__, default_iters=20, extra=[("--epochs", {"type": int, "default": 4})])
size = 4096 if args.device == "cuda" else 64
dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
a = torch.randn(size, size, device=args.device, dtype=dtype)
w = torch.randn(size, size, device=args.device, dtype=dtype)
bias = torch.randn(size, device=args.device, dtype=dtype)
clock = _timing.IterClock(args.device, args.skip)
for epoch in range(args.epochs):
    for batch in range(args.iters):
        clock.tick()
        h = torch.nn.functional.gelu(a @ w + bias)
        a = (h @ w).clamp_(-1, 1)
clock.report("nested_gemm_loops")
