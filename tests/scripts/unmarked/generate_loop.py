"""Unmarked decoding: the script calls a library generate() (8 new tokens each) in its own loop; the
step is one top-level TinyLM.forward, 8 per generate() call."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
from fake_generation import generate


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(128, 64)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(3))
        self.head = torch.nn.Linear(64, 128)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens).mean(1)
        for block in self.blocks:  # a loop inside a forward is never the step
            x = block(x).relu()
        return self.head(x)


model = TinyLM().eval()
prompt = torch.randint(0, 128, (2, 8))
for call in range(int(sys.argv[1]) if len(sys.argv) > 1 else 40):
    generate(model, prompt, 8)
print("finished all calls")
