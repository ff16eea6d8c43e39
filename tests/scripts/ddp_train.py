"""A data-parallel training loop launched by torchrun: tiny over gloo on the CPU (the default, for
CI), or sized for H200s over NCCL with --device cuda (one GPU per rank, cuda:LOCAL_RANK).

--mode ddp: DistributedDataParallel reduces the gradients (bucketed, launched during backward).
--mode manual: every gradient is all-reduced by hand after backward(), one blocking call each: the
  communication cannot overlap with any compute.
--bucket-cap-mb MB: DDP's bucket_cap_mb (default 25); one at least the model's size puts every gradient in one
  bucket, reduced only after the whole backward.
--heavy-rank R --heavy-factor F: rank R's batch is F times the others' (uneven work: a straggler by compute).
--slow-rank R --sleep-ms MS: rank R sleeps MS after each optimizer step (a straggler).
--crash-rank R --crash-at N: rank R raises at iteration N (--crash-how abort: dies by SIGABRT, outside Python).
--record-env DIR: each rank records whether a collector wrapper (hybrid.inject.rank --wrap-json) ran it."""

import argparse
import json
import os
import time

import _process_group
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=("ddp", "manual"), default="ddp")
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--layers", type=int, default=0, help="hidden Linear(2W, 2W) layers")
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
parser.add_argument("--heavy-rank", type=int, default=-1)
parser.add_argument("--heavy-factor", type=int, default=1)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--sleep-ms", type=float, default=0.0)
parser.add_argument("--crash-rank", type=int, default=-1)
parser.add_argument("--crash-at", type=int, default=-1)
parser.add_argument("--crash-how", choices=("raise", "abort"), default="raise")
parser.add_argument("--record-env", help="write each rank's HYBRID_WRAPPED variable to RECORD_ENV/rank<R>.json")
args = parser.parse_args()

device = _process_group.init(args.device)
rank = dist.get_rank()
if args.record_env:
    with open(f"{args.record_env}/rank{rank}.json", "w") as record:
        json.dump({"wrapped": os.environ.get("HYBRID_WRAPPED")}, record)
torch.manual_seed(0)
hidden = [m for _ in range(args.layers) for m in (torch.nn.Linear(2 * args.width, 2 * args.width), torch.nn.ReLU())]
model = torch.nn.Sequential(torch.nn.Linear(args.width, 2 * args.width), torch.nn.ReLU(), *hidden,
                            torch.nn.Linear(2 * args.width, args.width)).to(device)
if args.mode == "ddp":
    model = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batch = args.batch * (args.heavy_factor if rank == args.heavy_rank else 1)
data = torch.randn(batch, args.width, device=device)
try:
    for i in range(args.iters):
        if rank == args.crash_rank and i == args.crash_at:
            if args.crash_how == "abort":
                os.abort()
            raise RuntimeError(f"planted failure on rank {rank} at iteration {i}")
        optimizer.zero_grad()
        model(data).square().mean().backward()
        if args.mode == "manual":
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
        optimizer.step()
        if rank == args.slow_rank:
            time.sleep(args.sleep_ms / 1000.0)
finally:
    dist.destroy_process_group()
