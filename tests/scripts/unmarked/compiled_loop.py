"""A torch.compile'd model (aot_eager: no C++ compiler needed on a CPU) in an inference loop. Writes how
many graphs dynamo compiled and how many graph breaks it hit to the JSON file argv[1], in a finally-block
that also runs when hybrid stops the script."""

import json
import sys

import torch
from torch import nn

model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).eval()
compiled = torch.compile(model, backend="aot_eager")
x = torch.randn(8, 64)
try:
    with torch.no_grad():
        for _ in range(60):
            compiled(x)
finally:
    from torch._dynamo.utils import counters

    with open(sys.argv[1], "w") as record:
        json.dump({"graphs": counters["stats"]["unique_graphs"], "breaks": sum(counters["graph_break"].values())},
                  record)
