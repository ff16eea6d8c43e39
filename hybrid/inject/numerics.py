"""The loss of each plain step, so that `hybrid run --verify` can say whether a fix changed the numbers: the
value of the tensor `.backward()` was last called on in the step, by step index (steps counted before it).
A fix's run and the run it is compared with compute the same step only from the same random state, so the
random generators are seeded before the script runs (a script that seeds itself keeps its own seed).

Only steps without a collector are captured (the plain window, a plain pass): a copy per step under
torch.profiler would be one more kernel in the profile. Each loss is copied on the device when noted (a
CUDA graph's output is overwritten by its next replay) and read at the end, never mid-step: reading it then
would synchronize the step being timed.

Standard library and torch only: it runs inside the profiled process (hybrid.inject.script --capture-loss)."""

from __future__ import annotations

import functools
import json
import os
import random
from pathlib import Path
from typing import Any

from hybrid.inject.stepping import active_session

LOSS_FILE = "loss.json"
SEED = 0
# Step losses kept on the device until the end, of the steps before this one: the comparison reads the last
# step of the run's plain window (its warmup and steps, tens of steps), which a fix's run reaches inside its
# own warmup (torch.compile: hybrid.rules.switches.COMPILED_WARMUP) or in the first of its paired windows,
# two more windows before its end (on the H200 the paired TF32 runs went on to step 37, and keeping their
# last 16 losses had dropped the compared step 14).
KEEP_STEPS = 256

_losses: dict[int, Any] = {}
_backward_calls = 0
_pid = os.getpid()  # a forked DataLoader worker runs no step of its own


def _captures(session: Any) -> bool:
    """Steps without a collector: every step of a plain pass, the torch pass's steps until its plain window
    ends (after that torch.profiler records)."""
    config = session.config
    if config.pass_name == "plain":
        return True
    return config.pass_name == "torch" and len(session.plain_end_ns) < config.plain_steps


def _note(tensor: Any) -> None:
    global _backward_calls
    session = active_session()
    if session is None or os.getpid() != _pid or not _captures(session):
        return
    _backward_calls += 1
    if tensor.numel() != 1 or session.steps_seen >= KEEP_STEPS:
        return
    _losses[session.steps_seen] = tensor.detach().clone()


def install() -> None:
    """Seed the random generators and note the tensor of every `.backward()` call from now on."""
    import torch

    random.seed(SEED)
    torch.manual_seed(SEED)
    try:
        import numpy

        numpy.random.seed(SEED)
    except ImportError:
        pass
    backward = torch.Tensor.backward

    @functools.wraps(backward)
    def noted_backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        _note(self)
        return backward(self, *args, **kwargs)

    torch.Tensor.backward = noted_backward  # type: ignore[method-assign]


def write(out_dir: Path) -> None:
    """OUT/loss.json: {"losses": {step index: value}, "backward_calls": n} (calls in the captured steps)."""
    values = {}
    for step, tensor in sorted(_losses.items()):
        try:
            values[str(step)] = float(tensor.float().item())
        except RuntimeError:  # the device failed: no value rather than no record
            continue
    partial = out_dir / (LOSS_FILE + ".partial")
    partial.write_text(json.dumps({"losses": values, "backward_calls": _backward_calls, "seed": SEED}))
    os.replace(partial, out_dir / LOSS_FILE)
