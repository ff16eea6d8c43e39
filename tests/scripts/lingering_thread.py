"""Starts a non-daemon thread that polls a queue forever (a producer nothing tells to stop), then trains
steps with an optimizer: once hybrid stops the script after its measured steps, only that thread keeps
the process alive."""

import queue
import threading

import torch

jobs: queue.Queue = queue.Queue()


def poll_forever() -> None:
    while True:
        try:
            jobs.get(timeout=0.1)
        except queue.Empty:
            continue


threading.Thread(target=poll_forever, name="producer").start()
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(1000):
    model(torch.randn(4, 8)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
