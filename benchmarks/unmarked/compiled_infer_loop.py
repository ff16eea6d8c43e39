"""A torch.compile'd inference loop: a 6-layer Transformer encoder (d_model 1024, 16 heads) at batch
32 x 256 tokens in bf16, compiled with the default mode; the first call compiles (start-up)."""

import _timing
import torch
from torch import nn

args = _timing.parse_args(__doc__, default_iters=60)
layer = nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
model = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).to(args.device).eval()
dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
model = model.to(dtype)
compiled = torch.compile(model)
tokens = torch.randn(32, 256, 1024, device=args.device, dtype=dtype)
clock = _timing.IterClock(args.device, args.skip)
with torch.inference_mode():
    for _ in range(args.iters):
        clock.tick()
        out = compiled(tokens)
clock.report("compiled_infer_loop")
