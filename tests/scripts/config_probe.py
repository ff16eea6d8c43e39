"""A CPU training loop that switches on what hybrid.inject.run_config records, each set by a flag, so a test can
compare the recorded `config` with what the script did: --tf32, --autocast bf16, --compile MODE (the model is
wrapped, never called compiled: no compiler needed), --optimizer sgd|adamw with --fused, --workers N with
--pin-memory, --channels-last, --scaler, --clip-one-by-one (clip_grad_norm_ with foreach=False, through a
generator of parameters); --device cuda on a GPU."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--tf32", action="store_true")
parser.add_argument("--autocast", default=None)
parser.add_argument("--compile", default=None)
parser.add_argument("--optimizer", default="sgd")
parser.add_argument("--fused", action="store_true")
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--pin-memory", action="store_true")
parser.add_argument("--channels-last", action="store_true")
parser.add_argument("--scaler", action="store_true")
parser.add_argument("--clip-one-by-one", action="store_true")
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--device", default="cpu")
args = parser.parse_args()
torch.manual_seed(0)

torch.backends.cuda.matmul.allow_tf32 = args.tf32
torch.backends.cudnn.allow_tf32 = args.tf32
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(8, 4)).to(args.device)
if args.channels_last:
    model = model.to(memory_format=torch.channels_last)
compiled = torch.compile(model, mode=args.compile) if args.compile else None
if args.optimizer == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=args.fused or None)
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
scaler = torch.amp.GradScaler(args.device) if args.scaler else None
# --steps batches of 8: the loop is as long as asked (a fixed 64 samples stopped `--steps 40` after 8 steps,
# inside the warmup of a loaded box whose step times had not settled).
samples = 8 * args.steps
data = torch.utils.data.TensorDataset(torch.randn(samples, 3, 16, 16), torch.randint(0, 4, (samples,)))
loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=args.workers, pin_memory=args.pin_memory)
dtype = getattr(torch, args.autocast) if args.autocast else None
for step, (images, labels) in zip(range(args.steps), loader):
    optimizer.zero_grad()
    images, labels = images.to(args.device), labels.to(args.device)
    with torch.autocast(args.device, dtype=dtype, enabled=dtype is not None):
        loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    if args.clip_one_by_one:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=False)
    optimizer.step()
print(f"final loss {loss.item():.6f}")
