"""HEALTHY CONTROL (no planted problem): a training loop whose input pipeline is done right:
pinned host batches, non_blocking copies on a side stream, prefetched one step ahead so the copy
overlaps the previous step's compute. Nothing should be reported above MODERATE.

Sizing on an H200: a (64, 3, 224, 224) fp32 batch is 38 MB, ~0.8 ms over PCIe gen5 from pinned
memory, hidden behind the ~1.2 TFLOP a step (with backward) of the bf16 conv net below, ~5 ms.
"""

import _planted
import torch
import torch.nn.functional as F
from torch import nn

args = _planted.parse_args(__doc__)
device = args.device
on_cuda = device.type == "cuda"
batch = _planted.pick(device, 64, 2)
side = _planted.pick(device, 224, 32)
BATCHES_IN_MEMORY = 8

host_images = torch.randn(BATCHES_IN_MEMORY, batch, 3, side, side)
host_labels = torch.randint(0, 10, (BATCHES_IN_MEMORY, batch))
if on_cuda:
    host_images, host_labels = host_images.pin_memory(), host_labels.pin_memory()


def conv_block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(inplace=True), nn.MaxPool2d(2))


model = nn.Sequential(conv_block(3, 64), conv_block(64, 128), conv_block(128, 256), conv_block(256, 512),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)).to(device)
model = model.to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
copy_stream = torch.cuda.Stream() if on_cuda else None


def fetch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Start copying step's batch on the side stream; the caller waits on it only when used."""
    index = step % BATCHES_IN_MEMORY
    if not on_cuda:
        return host_images[index], host_labels[index]
    with torch.cuda.stream(copy_stream):
        return (host_images[index].to(device, non_blocking=True),
                host_labels[index].to(device, non_blocking=True))


timer = _planted.Timer(device)
next_batch = fetch(0)
for step in range(args.steps):
    if on_cuda:
        torch.cuda.current_stream().wait_stream(copy_stream)
    images, labels = next_batch
    if on_cuda:  # tell the allocator these buffers are in use on the compute stream too
        images.record_stream(torch.cuda.current_stream())
        labels.record_stream(torch.cuda.current_stream())
    next_batch = fetch(step + 1)  # overlaps this step's compute
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(images.contiguous(memory_format=torch.channels_last)), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
timer.report("healthy_pipelined_input", args.steps)
