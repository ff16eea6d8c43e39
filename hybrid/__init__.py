"""hybrid: why a PyTorch training or inference step is slow on the GPU, and what to change.

Scripts mark steps with `hybrid.mark_step()` or `with hybrid.step():` when they have no optimizer
(outside `hybrid run` both do nothing). `profile_model(model, input_gen, steps=50)` profiles a model
in-process and returns the results dict. Attributes load lazily so `hybrid report` never imports torch.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "step": "hybrid.inject.stepping",
    "mark_step": "hybrid.inject.stepping",
    "set_batch_size": "hybrid.inject.stepping",
    "name_modules": "hybrid.inject.stepping",
    "profile_model": "hybrid.api",
}

__all__ = ["__version__", "mark_step", "name_modules", "profile_model", "set_batch_size", "step"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hybrid' has no attribute {name!r}")
