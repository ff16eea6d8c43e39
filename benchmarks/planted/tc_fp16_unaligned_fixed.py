"""FIXED twin of tc_fp16_unaligned.py: every GEMM dimension is a multiple of 8 (vocabulary padded).

Sizing on an H200: 8192 tokens a step through 2 FFN blocks and the vocabulary head: ~3.3 TFLOP a
step with backward. fp16 tensor-core GEMMs want every dimension a multiple of 8 (16-byte aligned
rows); odd sizes force cuBLAS onto narrow-alignment kernels or padding copies that reach a
fraction of the ~990 TFLOP/s dense peak. Aligned, the step's GEMMs take ~5-6 ms; unaligned,
expect about twice that, and the GEMMs are most of the step.
Fix (twin): round d_model to 1024, FFN to 4096 and pad the vocabulary to 50304 (= 393 x 128).
"""

import _planted
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
# FIXED: multiples of 8 (the padded vocabulary rows are never a label, so they learn to lose)
d_model = _planted.pick(device, 1024, 64)
ffn = _planted.pick(device, 4096, 256)
vocab = _planted.pick(device, 50304, 1008)
tokens = _planted.pick(device, 8192, 64)
VOCAB_USED = _planted.pick(device, 50257, 1001)  # labels range over the real vocabulary


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, ffn), nn.GELU(), nn.Linear(ffn, d_model))
            for _ in range(2))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids)
        for block in self.blocks:
            hidden = hidden + block(hidden)
        return self.head(hidden)


model = TinyLM().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device.type)
ids = torch.randint(0, VOCAB_USED, (tokens,), device=device)
labels = torch.randint(0, VOCAB_USED, (tokens,), device=device)

timer = _planted.Timer(device)
for step in range(args.steps):
    with torch.autocast(device.type, dtype=torch.float16):
        loss = F.cross_entropy(model(ids), labels)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
timer.report("tc_fp16_unaligned_fixed", args.steps)
