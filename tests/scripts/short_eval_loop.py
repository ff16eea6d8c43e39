"""A short evaluation loop that ends before hybrid's measured window does (24 batches), written without a
function or class of its own: nothing in it refers back to its globals, so its objects are freed as soon
as the script returns. No optimizer, no hybrid import."""

import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(24 * 64, 256), torch.randint(10, (24 * 64,))), batch_size=64)
model = torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).eval()
correct = 0
with torch.no_grad():
    for inputs, labels in loader:
        correct += int((model(inputs).argmax(1) == labels).sum())
print("accuracy", correct / 24 / 64)
