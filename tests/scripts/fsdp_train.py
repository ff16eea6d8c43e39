"""An FSDP2 (`fully_shard`) training loop launched by torchrun: tiny over gloo on the CPU (the default, for
CI), or sized for H200s over NCCL with --device cuda (one GPU per rank, cuda:LOCAL_RANK).

--wrap layer: every block is its own FSDP unit (its parameters gathered just before it runs, so the next
  block's all-gather can overlap this block's compute), then the root: the usual FSDP2 layout.
--wrap root: one FSDP unit for the whole model: one all-gather of every parameter before the forward and one
  reduce-scatter of every gradient after the backward, with nothing left to compute beside either.
--reshard-after-forward 0|1: fully_shard's reshard_after_forward for the blocks (1, the default, frees each
  block's gathered parameters after its forward and gathers them again in the backward).
--forward-prefetch N / --backward-prefetch N: explicit prefetch of the next N blocks
  (set_modules_to_forward_prefetch / set_modules_to_backward_prefetch); 0 leaves FSDP2's implicit prefetch.
--slow-rank R --sleep-ms MS: rank R sleeps MS after each optimizer step (a straggler)."""

import argparse
import time

import _process_group
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--wrap", choices=("layer", "root"), default="layer")
parser.add_argument("--reshard-after-forward", type=int, choices=(0, 1), default=1)
parser.add_argument("--forward-prefetch", type=int, default=0)
parser.add_argument("--backward-prefetch", type=int, default=0)
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--sleep-ms", type=float, default=0.0)
args = parser.parse_args()

device = _process_group.init(args.device)
rank = dist.get_rank()
torch.manual_seed(0)
blocks = [
    torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.GELU()).to(device)
    for _ in range(args.layers)
]
model = torch.nn.Sequential(*blocks)
if args.wrap == "layer":
    for block in blocks:
        fully_shard(block, reshard_after_forward=bool(args.reshard_after_forward))
fully_shard(model)
if args.wrap == "layer" and args.forward_prefetch:
    for i, block in enumerate(blocks):
        block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 1 + args.forward_prefetch])
if args.wrap == "layer" and args.backward_prefetch:
    for i, block in enumerate(blocks):
        block.set_modules_to_backward_prefetch(blocks[max(0, i - args.backward_prefetch) : i][::-1])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(args.batch, args.width, device=device)
try:
    for _ in range(args.iters):
        optimizer.zero_grad()
        model(data).square().mean().backward()
        optimizer.step()
        if rank == args.slow_rank:
            time.sleep(args.sleep_ms / 1000.0)
finally:
    dist.destroy_process_group()
