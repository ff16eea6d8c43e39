"""A loop whose step calls no module, only a method of a plain object looked up at each call: no
module-level name holds the function the step spends its time in (benchmarks/planted/graph_unfused_small_ops
calls a module-level function instead)."""

import torch


class Layers:
    def layer(self, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return h + 0.5 * torch.tanh(h @ w) * torch.sigmoid(h)


layers = Layers()
w = torch.randn(32, 32) / 8
x = torch.randn(16, 32)
for _step in range(60):
    h = x
    for _ in range(4):
        h = layers.layer(h, w)
