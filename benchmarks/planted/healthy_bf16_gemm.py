"""HEALTHY CONTROL (no planted problem): a chain of large bf16 GEMMs, compute-bound on the
tensor cores. Nothing should be reported above MODERATE.

Sizing on an H200: 8 matmuls of 8192 x 8192 x 8192 in bf16 a step, 2 x 8192^3 = 1.1 TFLOP each,
8.8 TFLOP a step at ~700 TFLOP/s achieved of ~990 dense peak = ~13 ms. Arithmetic intensity
~2700 FLOP/byte (far right of the ~200 ridge point); 8 launches a step, no syncs, no copies.
"""

import _planted
import torch

args = _planted.parse_args(__doc__)
device = args.device
side = _planted.pick(device, 8192, 256)
GEMMS_PER_STEP = 8

generator = torch.Generator(device=device).manual_seed(0)
# Scaled so that repeated products stay O(1) in bf16 instead of overflowing.
a = (torch.randn(side, side, device=device, generator=generator) / side**0.5).to(torch.bfloat16)
b = (torch.randn(side, side, device=device, generator=generator) / side**0.5).to(torch.bfloat16)

timer = _planted.Timer(device)
with torch.inference_mode():
    for step in range(args.steps):
        c = a
        for _ in range(GEMMS_PER_STEP):
            c = c @ b
        _planted.mark_step()
timer.report("healthy_bf16_gemm", args.steps)
