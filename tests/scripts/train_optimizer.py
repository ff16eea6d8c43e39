"""A tiny training loop with an optimizer and no hybrid import: steps are found by the optimizer hook.
Writes its argv, cwd and the number of steps it ran to the JSON file named by --record, and whether
the file named by --peek existed when its finally-block ran."""

import argparse
import json
import os
import sys

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=50)
parser.add_argument("--record", required=True)
parser.add_argument("--peek")
args = parser.parse_args()

record = {"argv": sys.argv, "cwd": os.getcwd(), "sys_path0": sys.path[0], "iters_done": 0}
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(16, 32)
try:
    for _ in range(args.iters):
        optimizer.zero_grad()
        loss = model(data).square().mean()
        loss.backward()
        try:
            optimizer.step()
        except Exception:  # noqa: BLE001 - a user's catch-all must not swallow hybrid's stop at the step limit
            record["swallowed"] = True
        record["iters_done"] += 1
finally:
    if args.peek:
        record["peeked_exists"] = os.path.exists(args.peek)
    with open(args.record, "w") as f:
        json.dump(record, f)
