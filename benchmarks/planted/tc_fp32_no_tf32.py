"""PLANTED (TENSOR_CORE): fp32 training with TF32 off, so every GEMM runs on the CUDA cores.

Sizing on an H200: 4 Linear(4096, 4096) layers at batch 8192 are 3 x 2 x 8192 x 4096^2 x 4 =
3.3 TFLOP a step. In true fp32 (~67 TFLOP/s peak, ~50 achieved) that is ~65 ms; with TF32 tensor
cores (~495 TFLOP/s dense peak, ~300+ achieved) ~10 ms. The GEMMs are >95% of the step either
way; the tensor pipes sit idle in the planted version.
Fix (twin): allow TF32 for matmuls and cuDNN (`torch.backends.cuda.matmul.allow_tf32 = True`).
"""

import _planted
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
# PLANTED: true fp32 GEMMs (also torch's default for matmul) keep the tensor cores idle
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
width = _planted.pick(device, 4096, 64)
batch = _planted.pick(device, 8192, 32)

model = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                      nn.Linear(width, width), nn.GELU(), nn.Linear(width, width)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
inputs = torch.randn(batch, width, device=device)
targets = torch.randn(batch, width, device=device)

timer = _planted.Timer(device)
for step in range(args.steps):
    loss = F.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
timer.report("tc_fp32_no_tf32", args.steps)
