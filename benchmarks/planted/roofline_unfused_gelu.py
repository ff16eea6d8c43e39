"""PLANTED (ROOFLINE): a tanh-GELU written as a chain of eight elementwise ops over a 512 MB
tensor: each op is a separate kernel that reads and writes the whole tensor.

Sizing on an H200: x is 128 M fp32. Each of the 8 kernels moves ~1-1.5 GB (read one or two
inputs, write one output), ~9 GB a step at ~4 TB/s achieved = ~2.3 ms, for ~10 FLOP per element:
an arithmetic intensity of ~0.15 FLOP/byte, far left of the ridge point (~200 FLOP/byte for
fp32 on H200), so the step sits on the memory roof at a tiny fraction of compute peak. The fused
op reads 512 MB and writes 512 MB once, ~0.25 ms.
Fix (twin): F.gelu(x, approximate="tanh"), one kernel computing the same function.
"""

import math

import _planted
import torch

args = _planted.parse_args(__doc__)
device = args.device
elements = _planted.pick(device, 128 * 2**20, 2**18)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

generator = torch.Generator(device=device).manual_seed(0)
x = torch.randn(elements, device=device, generator=generator)


def gelu_tanh(t: torch.Tensor) -> torch.Tensor:
    # PLANTED: eight separate full-tensor passes through DRAM
    inner = SQRT_2_OVER_PI * (t + 0.044715 * torch.pow(t, 3))
    return 0.5 * t * (1.0 + torch.tanh(inner))


timer = _planted.Timer(device)
with torch.inference_mode():
    total = torch.zeros((), device=device)
    for step in range(args.steps):
        y = gelu_tanh(x)
        total += y[:1024].sum()
        _planted.mark_step()
timer.report("roofline_unfused_gelu", args.steps)
