"""PLANTED (OCCUPANCY): softmax over very long rows of a tensor with only 4 rows.

Sizing on an H200: x is 4 x 8 M fp32 (128 MB). torch's softmax kernel for rows too long for
shared memory gives each row one thread block that makes three passes over it (max, sum,
normalize): a grid of 4 blocks on 132 SMs, 97% of the GPU idle, ~3 x 32 MB per block at
~25-50 GB/s per SM: ~2-4 ms a step for what a full-GPU pass does in ~0.1 ms.
Fix (twin): the same softmax from full-GPU reductions: amax and sum over the rows use every SM.
"""

import _planted
import torch

args = _planted.parse_args(__doc__)
device = args.device
ROWS = 4
row_length = _planted.pick(device, 8 * 2**20, 2**14)

generator = torch.Generator(device=device).manual_seed(0)
logits = torch.randn(ROWS, row_length, device=device, generator=generator)

timer = _planted.Timer(device)
with torch.inference_mode():
    total = torch.zeros((), device=device)
    for step in range(args.steps):
        probs = torch.softmax(logits, dim=1)  # PLANTED: one block per row, 4 blocks in all
        total += probs[:, 0].sum()
        _planted.mark_step()
timer.report("occ_few_row_softmax", args.steps)
