"""A loop over a model whose forward torch.compile must leave eager (`torch.compiler.disable`, as libraries
mark code dynamo cannot trace): compiling the model compiles no graph, and the step runs as it did."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 32)

    @torch.compiler.disable
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.layer(x)) * torch.sigmoid(x)


model = Model()
x = torch.randn(16, 32)
with torch.no_grad():
    for _step in range(40):
        y = model(x)
