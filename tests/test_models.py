"""Real CPU training steps of the built-in workloads, at tiny sizes."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hybrid import models
from hybrid.errors import UsageError
from hybrid.inject.stepping import MODULE_NAME_ATTR

REPO = Path(__file__).resolve().parents[1]


def _params_snapshot(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _run_and_check(workload: models.Workload, steps: int = 2) -> None:
    before = _params_snapshot(workload.model)
    losses = [float(workload.train_step()) for _ in range(steps)]
    assert all(math.isfinite(loss) for loss in losses)
    changed = [
        not torch.equal(b, a.detach()) for b, a in zip(before, workload.model.parameters(), strict=False)
    ]
    # Every parameter that received a gradient moved; the whole model must have learned something.
    assert sum(changed) >= 0.9 * len(changed), f"only {sum(changed)}/{len(changed)} parameters changed"


@pytest.mark.parametrize("precision", ["fp32", "bf16-amp", "fp16-amp"])
def test_simple_cnn_trains(precision: str) -> None:
    workload = models.build_workload("simple_cnn", batch_size=4, precision=precision, device="cpu")
    assert workload.device.type == "cpu"
    images, labels = workload.make_batch()
    assert images.shape == (4, 3, 32, 32) and images.device.type == "cpu"
    assert labels.max() < models.CIFAR_CLASSES
    _run_and_check(workload)


def test_modules_carry_qualified_names_for_nvtx_ranges() -> None:
    workload = models.build_workload("simple_cnn", batch_size=2, device="cpu")
    assert getattr(workload.model.features[0], MODULE_NAME_ATTR) == "features.0"
    assert getattr(workload.model.head, MODULE_NAME_ATTR) == "head"


def test_transformer_trains() -> None:
    workload = models.build_workload("transformer", batch_size=2, device="cpu", input_size=16)
    tokens, labels = workload.make_batch()
    assert tokens.shape == labels.shape == (2, 16)
    assert isinstance(workload.optimizer, torch.optim.AdamW)
    _run_and_check(workload)


@pytest.mark.slow
def test_resnet50_trains() -> None:
    workload = models.build_workload("resnet50", batch_size=2, device="cpu", input_size=32)
    assert sum(p.numel() for p in workload.model.parameters()) > 25_000_000  # the real resnet50
    _run_and_check(workload, steps=1)


def test_fp32_turns_tf32_off_and_tf32_on() -> None:
    models.configure_precision("fp32")
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    models.configure_precision("tf32")
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32


def test_default_is_pytorchs_own_precision_even_after_another_mode() -> None:
    models.configure_precision("fp32")
    models.configure_precision("default")
    assert not torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest"


def test_unknown_model_lists_valid_names() -> None:
    with pytest.raises(UsageError) as info:
        models.build_workload("resnet51")
    assert all(name in info.value.fix for name in models.MODEL_NAMES)


def test_cpu_defaults_are_smaller_than_gpu_defaults() -> None:
    for name in models.MODEL_NAMES:
        cpu, gpu = models.cpu_defaults(name), models.gpu_defaults(name)
        assert cpu["batch_size"] * cpu["input_size"] ** 2 < gpu["batch_size"] * gpu["input_size"] ** 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA shrink notice")
def test_cli_runs_and_says_what_it_shrank() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hybrid.models", "simple_cnn", "--steps", "1", "--warmup", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "batch_size 256 -> 16" in proc.stderr
    assert "steps" not in proc.stderr.split("shrunk")[1]  # steps were given, so not shrunk
    assert "1 steps, final loss" in proc.stdout


def test_cli_unknown_model_exits_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hybrid.models", "vgg"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "simple_cnn" in proc.stderr
