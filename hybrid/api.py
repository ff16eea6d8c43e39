"""`profile_model(model, input_gen, steps=50)`: the torch pass run in this process on a model object,
analyzed by the same pipeline as `hybrid run`; returns the results.json document as a dict.

Nsight passes need a process of their own, so this API is torch-only (or cpu-only); use
`hybrid run` on a script for measured timelines and counters."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybrid.errors import UsageError


def _call(model: Any, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _default_loss(output: Any) -> Any:
    first = output[0] if isinstance(output, (tuple, list)) else output
    return first.float().mean()


def profile_model(
    model: Any,
    input_gen: Callable[[], Any],
    steps: int = 50,
    *,
    warmup: int = 5,
    optimizer: Any = None,
    loss_fn: Callable[[Any, Any], Any] | None = None,
    train: bool = True,
    out_dir: str | Path | None = None,
) -> dict:
    """Profile `steps` steps of `model` on batches from `input_gen()` (a tensor, a tuple of positional
    inputs or a dict of keyword inputs) after `warmup` unmeasured steps.

    train=True runs forward, loss (`loss_fn(output, batch)`, default the output's mean), backward and,
    when given, `optimizer.step()`; without an optimizer the weights are left untouched.
    train=False runs forward under torch.no_grad(). Artifacts go to `out_dir` (a temporary folder
    when None); `results["run_dir"]` says where.
    """
    import torch

    from hybrid.inject.stepping import SessionConfig, StepSession
    from hybrid.pipeline import analyze_run_dir
    from hybrid.rundir import RunDir

    if steps <= 0:
        raise UsageError(f"steps must be at least 1 (got {steps})", "pass steps=50, for example")
    if not callable(input_gen):
        raise UsageError("input_gen must be a callable returning one batch", "pass lambda: torch.randn(...)")
    path = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="hybrid-api-"))
    run = RunDir.create(path)
    run.update_run_json(command=f"profile_model({type(model).__name__})", started_at=time.time())
    session = StepSession(
        SessionConfig(
            pass_name="torch",
            out_dir=run.pass_dir("torch"),
            warmup_steps=warmup,
            measured_steps=steps,
            stop_at_limit=False,
        )
    )
    started = time.monotonic()
    with session:
        for _ in range(warmup + steps):
            batch = input_gen()
            if train:
                if optimizer is not None:
                    optimizer.zero_grad(set_to_none=True)
                output = _call(model, batch)
                loss = loss_fn(output, batch) if loss_fn else _default_loss(output)
                loss.backward()
                if optimizer is not None:
                    optimizer.step()
                else:
                    model.zero_grad(set_to_none=True)
            else:
                with torch.no_grad():
                    _call(model, batch)
            # The optimizer hook already counted this step when an optimizer stepped; an explicit
            # mark after it is recognized as the same step by the session.
            session.mark("mark_step")
    inject = run.read_inject("torch") or {}
    run.update_run_json(
        passes=[
            {
                "name": "torch",
                "status": "ok",
                "wall_s": round(time.monotonic() - started, 3),
                "returncode": 0,
                "message": "in-process (profile_model)",
                "step_time_ms": inject.get("step_time_ms"),
            }
        ]
    )
    results = analyze_run_dir(path)
    results["run_dir"] = str(path)
    return results
