"""A loop whose iterations do no tensor work at all (string building), then one tensor product: no step
unit fits."""

import torch

parts = []
for i in range(2000):
    parts.append(str(i * i))
print(len("".join(parts)), float((torch.randn(64, 64) @ torch.randn(64, 64)).sum()))
