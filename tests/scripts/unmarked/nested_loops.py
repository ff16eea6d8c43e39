"""Epochs x batches of matrix products, no module and no optimizer: the step is one inner iteration."""

import sys

import torch

epochs, batches = (int(v) for v in sys.argv[1:3]) if len(sys.argv) > 2 else (3, 40)
a = torch.randn(192, 192)
w = torch.randn(192, 192) / 192**0.5
for epoch in range(epochs):
    for batch in range(batches):
        a = torch.tanh(a @ w)
print("finished", float(a.sum()))
