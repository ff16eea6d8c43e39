"""A CPU loop whose every 4th step takes longer in one op (uneven::work, which sleeps), for the reason
argv[1] names:

    shapes   the op gets 8x the rows on those steps and sleeps in proportion (inputs of varying size:
             padding or bucketing them is the fix)
    same     the op gets the same input and sleeps longer (the step's work is unchanged: something
             slowed the host then)
    first    every 4th step brings a size no earlier step ran, which the op plans once (8x its sleep, as cuDNN
             builds an execution plan per new sequence length) and the steps after reuse
"""

import sys
import time

import torch

SLEEP_S_PER_ROW = 4e-5  # 256 rows: 10 ms; 2048 rows: 82 ms, over 3x a typical step on a loaded box


planned: set[int] = set()


@torch.library.custom_op("uneven::work", mutates_args=())
def work(x: torch.Tensor, stalled: bool) -> torch.Tensor:
    stalled = stalled or (mode == "first" and x.shape[0] not in planned)
    planned.add(x.shape[0])
    time.sleep(SLEEP_S_PER_ROW * x.shape[0] * (8 if stalled else 1))
    return x.clone()


mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(steps):
    uneven = step % 4 == 3
    rows = 256 + 8 * ((step + 1) // 4) if mode == "first" else 2048 if mode == "shapes" and uneven else 256
    x = torch.randn(rows, 64)
    loss = model(work(x, mode == "same" and uneven)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
