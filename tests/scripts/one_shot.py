"""Work that never repeats: one matrix product and one reduction, no loop, no module, no optimizer."""

import torch

a = torch.randn(256, 256)
b = (a @ a).tanh()
print("done", float(b.sum()))
