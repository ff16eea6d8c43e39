"""The built-in workloads' names and sizes (hybrid.models builds them), without torch: the CLI checks a
`--model` and says what it shrank for the CPU before anything imports torch (2 s on a 2-core box)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hybrid.errors import UsageError

MODEL_NAMES = ("resnet50", "transformer", "simple_cnn")


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


def cpu_defaults(name: str) -> dict:
    """The sizes used when no CUDA device is present, so the CLI can say what it shrank."""
    check_name(name)
    return asdict(CPU_SIZES[name])


def gpu_defaults(name: str) -> dict:
    check_name(name)
    return asdict(GPU_SIZES[name])


def check_name(name: str) -> None:
    if name not in MODEL_NAMES:
        raise UsageError(
            f"unknown built-in model {name!r}",
            f"use one of: {', '.join(MODEL_NAMES)}",
        )
