"""Built-in workloads: real training steps of resnet50, a transformer encoder and a small CNN on
synthetic data, so `hybrid run -m hybrid.models NAME` diagnoses something without a user script.

Run as `python -m hybrid.models NAME [--batch-size B] [--steps N] [--warmup W]
[--precision default|fp32|tf32|bf16-amp|fp16-amp] [--device cuda|cpu]`. The loop runs warmup + steps
training steps; under `hybrid run` the injector counts them through the optimizer step hook and
stops the script after the measured window.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import torch
from torch import nn

from hybrid.errors import HybridError, UsageError
from hybrid.inject.stepping import name_modules, set_batch_size
from hybrid.model_names import MODEL_NAMES

PRECISIONS = ("default", "fp32", "tf32", "bf16-amp", "fp16-amp")
# What each --precision sets, in the words the CLI and the workload's first line use.
PRECISION_MEANING = {
    "default": "PyTorch's defaults: fp32 matmuls at highest precision (TF32 off), cuDNN convolutions with TF32 on",
    "fp32": "TF32 off for matmuls and cuDNN convolutions (true fp32; not PyTorch's default)",
    "tf32": "TF32 on for matmuls and cuDNN convolutions",
    "bf16-amp": "torch.autocast(bfloat16), TF32 on for what stays fp32",
    "fp16-amp": "torch.autocast(float16) with a GradScaler, TF32 on for what stays fp32",
}

# Transformer encoder shape: a BERT-base-like width, small enough to train on one GPU at batch 32.
TRANSFORMER_D_MODEL = 512
TRANSFORMER_HEADS = 8
TRANSFORMER_LAYERS = 6
TRANSFORMER_FFN = 2048
TRANSFORMER_VOCAB = 32000
IMAGENET_CLASSES = 1000
CIFAR_CLASSES = 10


@dataclass(frozen=True)
class WorkloadSize:
    batch_size: int
    input_size: int  # image side in pixels for the CNNs, sequence length in tokens for the transformer
    steps: int
    warmup: int


# On a GPU: the shapes people benchmark (ImageNet 224x224, seq 256, CIFAR 32x32).
GPU_SIZES = {
    "resnet50": WorkloadSize(batch_size=64, input_size=224, steps=20, warmup=5),
    "transformer": WorkloadSize(batch_size=32, input_size=256, steps=20, warmup=5),
    "simple_cnn": WorkloadSize(batch_size=256, input_size=32, steps=20, warmup=5),
}
# Without CUDA: one resnet50 step at batch 64, 224x224 takes ~30 s on 2 CPU cores, so a diagnosis
# (plain + torch passes, warmup included) would take many minutes. Batch 2 at 64x64 is ~25x less
# work per step and brings the whole diagnosis to about two minutes; the others shrink alike.
CPU_SIZES = {
    "resnet50": WorkloadSize(batch_size=2, input_size=64, steps=3, warmup=1),
    "transformer": WorkloadSize(batch_size=2, input_size=64, steps=3, warmup=1),
    "simple_cnn": WorkloadSize(batch_size=16, input_size=32, steps=5, warmup=2),
}


@dataclass
class Workload:
    """One model with its optimizer and a synthetic batch that already lives on `device`."""

    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    batch_size: int
    input_size: int
    precision: str
    device: torch.device
    make_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    train_step: Callable[[], torch.Tensor]  # returns the detached loss; never syncs the host


def cpu_defaults(name: str) -> dict:
    """The sizes used when no CUDA device is present, so the CLI can say what it shrank."""
    _check_name(name)
    return asdict(CPU_SIZES[name])


def gpu_defaults(name: str) -> dict:
    _check_name(name)
    return asdict(GPU_SIZES[name])


def _check_name(name: str) -> None:
    if name not in MODEL_NAMES:
        raise UsageError(
            f"unknown built-in model {name!r}",
            f"use one of: {', '.join(MODEL_NAMES)}",
        )


def _resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            "--device cuda was asked for but torch sees no CUDA device",
            "run on a machine with an NVIDIA GPU and a CUDA build of torch, or pass --device cpu",
        )
    if resolved.type not in ("cuda", "cpu"):
        raise UsageError(f"unsupported device {resolved}", "use --device cuda or --device cpu")
    return resolved


def configure_precision(precision: str) -> None:
    """default: PyTorch's own settings (set explicitly, so an earlier call in the process does not leak);
    fp32: true fp32, TF32 off everywhere; the others allow TF32 for what stays in fp32."""
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}", f"use one of: {', '.join(PRECISIONS)}")
    if precision == "default":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True
        return
    allow_tf32 = precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32


def _autocast_dtype(precision: str) -> torch.dtype | None:
    return {"bf16-amp": torch.bfloat16, "fp16-amp": torch.float16}.get(precision)


class SimpleCNN(nn.Module):
    """Three conv/bn/relu/pool blocks and a linear head: a CIFAR-sized classifier."""

    def __init__(self, num_classes: int = CIFAR_CLASSES, input_size: int = 32) -> None:
        super().__init__()
        blocks = []
        channels = (3, 32, 64, 128)
        for c_in, c_out in itertools.pairwise(channels):
            blocks += [
                nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
        self.features = nn.Sequential(*blocks)
        side = input_size // 2 ** (len(channels) - 1)
        self.head = nn.Linear(channels[-1] * side * side, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(images), 1))


class TokenClassifierEncoder(nn.Module):
    """Token + learned position embedding, a pre-norm TransformerEncoder and a vocabulary head
    (a masked-LM-shaped workload: a prediction at every position)."""

    def __init__(self, seq_len: int) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(TRANSFORMER_VOCAB, TRANSFORMER_D_MODEL)
        self.position_embedding = nn.Parameter(torch.zeros(1, seq_len, TRANSFORMER_D_MODEL))
        layer = nn.TransformerEncoderLayer(
            TRANSFORMER_D_MODEL, TRANSFORMER_HEADS, TRANSFORMER_FFN, dropout=0.1,
            batch_first=True, norm_first=True,
        )
        # Nested tensors only apply to padded inference; turning them off also silences the
        # warning torch gives for norm_first layers.
        self.encoder = nn.TransformerEncoder(layer, TRANSFORMER_LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(TRANSFORMER_D_MODEL)
        self.head = nn.Linear(TRANSFORMER_D_MODEL, TRANSFORMER_VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.token_embedding(tokens) + self.position_embedding[:, : tokens.shape[1]]
        return self.head(self.norm(self.encoder(hidden)))


def _build_model(name: str, input_size: int) -> nn.Module:
    if name == "resnet50":
        try:
            import torchvision
        except ImportError as exc:
            raise UsageError(
                "the resnet50 workload needs torchvision, which is not installed",
                "pip install torchvision (or pip install 'hybrid-gpu-diagnosis[vision]')",
            ) from exc
        return torchvision.models.resnet50(weights=None, num_classes=IMAGENET_CLASSES)
    if name == "transformer":
        return TokenClassifierEncoder(seq_len=input_size)
    return SimpleCNN(CIFAR_CLASSES, input_size)


def _batch_maker(name: str, batch_size: int, input_size: int, device: torch.device):
    """Synthetic inputs generated directly on the device: no host tensor, no HtoD copy."""

    def make_batch() -> tuple[torch.Tensor, torch.Tensor]:
        if name == "transformer":
            tokens = torch.randint(0, TRANSFORMER_VOCAB, (batch_size, input_size), device=device)
            labels = torch.randint(0, TRANSFORMER_VOCAB, (batch_size, input_size), device=device)
            return tokens, labels
        classes = IMAGENET_CLASSES if name == "resnet50" else CIFAR_CLASSES
        images = torch.randn(batch_size, 3, input_size, input_size, device=device)
        labels = torch.randint(0, classes, (batch_size,), device=device)
        return images, labels

    return make_batch


def _build_optimizer(name: str, model: nn.Module) -> torch.optim.Optimizer:
    if name == "transformer":
        return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)


def build_workload(
    name: str,
    batch_size: int | None = None,
    precision: str = "default",
    device: str | torch.device | None = None,
    *,
    input_size: int | None = None,
) -> Workload:
    """Build model, optimizer and a device-resident synthetic batch. Sizes left as None take the
    GPU defaults on CUDA and the shrunken CPU defaults on the CPU."""
    _check_name(name)
    configure_precision(precision)
    resolved = _resolve_device(device)
    defaults = GPU_SIZES[name] if resolved.type == "cuda" else CPU_SIZES[name]
    batch_size = batch_size or defaults.batch_size
    input_size = input_size or defaults.input_size
    if batch_size < 1 or input_size < 8:
        raise UsageError(
            f"batch size {batch_size} / input size {input_size} too small",
            "use a batch size >= 1 and an input size >= 8",
        )

    model = _build_model(name, input_size).to(resolved)
    model.train()
    optimizer = _build_optimizer(name, model)
    make_batch = _batch_maker(name, batch_size, input_size, resolved)
    inputs, labels = make_batch()
    autocast_dtype = _autocast_dtype(precision)
    # fp16 needs loss scaling to keep small gradients from flushing to zero; bf16 has fp32's range.
    scaler = torch.amp.GradScaler(resolved.type) if precision == "fp16-amp" else None
    loss_fn = nn.CrossEntropyLoss()

    def train_step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        autocast = (
            torch.autocast(resolved.type, dtype=autocast_dtype) if autocast_dtype else nullcontext()
        )
        with autocast:
            logits = model(inputs)
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()

    # Qualified names for the --nvtx-modules ranges, batch size for throughput; outside a
    # hybrid session name_modules only tags attributes and set_batch_size does nothing.
    name_modules(model)
    set_batch_size(batch_size)
    return Workload(name, model, optimizer, batch_size, input_size, precision, resolved,
                    make_batch, train_step)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hybrid.models", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help=f"one of: {', '.join(MODEL_NAMES)}")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="measured steps the loop runs")
    parser.add_argument("--warmup", type=int, default=None, help="warmup steps run before them")
    parser.add_argument("--precision", choices=PRECISIONS, default="default",
                        help="; ".join(f"{name}: {meaning}" for name, meaning in PRECISION_MEANING.items()))
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="default: cuda when available, else cpu with shrunken sizes")
    return parser.parse_args(argv)


def shrink_notice(name: str, args_given: dict) -> str:
    """One line saying which CPU defaults replaced the GPU ones (options the user set are kept)."""
    cpu, gpu = cpu_defaults(name), gpu_defaults(name)
    shrunk = [f"{key} {gpu[key]} -> {cpu[key]}" for key in cpu
              if args_given.get(key) is None and cpu[key] != gpu[key]]
    if not shrunk:
        return ""
    return f"hybrid.models: no CUDA device, {name} shrunk to finish on the CPU: " + ", ".join(shrunk)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        _check_name(args.name)
        device = _resolve_device(args.device)
        defaults = gpu_defaults(args.name) if device.type == "cuda" else cpu_defaults(args.name)
        if device.type == "cpu":
            notice = shrink_notice(args.name, {"batch_size": args.batch_size, "steps": args.steps,
                                               "warmup": args.warmup})
            if notice:
                print(notice, file=sys.stderr)
        steps = args.steps if args.steps is not None else defaults["steps"]
        warmup = args.warmup if args.warmup is not None else defaults["warmup"]
        workload = build_workload(args.name, args.batch_size, args.precision, device)
        print(f"hybrid.models: {args.name}, precision {args.precision} ({PRECISION_MEANING[args.precision]})",
              file=sys.stderr)
    except HybridError as error:
        print(error.message(), file=sys.stderr)
        return error.exit_code
    loss = None
    for _ in range(warmup + steps):
        loss = workload.train_step()
    if loss is not None:
        # The only host sync of the run, after the loop, so it never shows up inside a step.
        print(f"{args.name}: {warmup + steps} steps, final loss {loss.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
