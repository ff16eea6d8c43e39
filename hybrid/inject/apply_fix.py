"""Switch one fix on inside the profiled process, before the user's script runs (`hybrid run --verify`): the
script's files are never touched. Flags are set (TF32, cudnn.benchmark); constructors are patched so the
objects the script builds get the setting (DataLoader workers and pinning, fused optimizers); the stepped
module, the first module with parameters that the script calls at the top level, is compiled or wrapped in
autocast from its second call on. Where the first step calls no such module, the compile fixes compile the
stepped function instead (hybrid.inject.stepped_function). What was done is written to OUT/fix.json, so a
fix that found nothing to act on says so instead of reporting a saving of zero as realized. A fix that is a
flag, or the default-mode compile (TOGGLES), can instead be timed off and on in the same process (`--paired`),
its windows in fix.json.

Standard library and torch only: it runs inside the profiled process (hybrid.inject.script --apply-fix)."""

from __future__ import annotations

import functools
import inspect
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybrid import host_cpus
from hybrid.inject.stepped_function import Called, StepWatch, bindings
from hybrid.inject.stepping import active_session, synchronize_device

FIX_FILE = "fix.json"

_actions: list[str] = []  # what the fix did, in order (fix.json `actions`)
_passed_over: list[str] = []  # what it found and left as built, and why (fix.json `left_as_built`)
_fix: str | None = None


def _did(action: str, *, taken: bool = True) -> None:
    kept = _actions if taken else _passed_over
    if action not in kept:  # a loader rebuilt every epoch is one action
        kept.append(action)


def _set_tf32(on: bool) -> bool:
    """TF32 for FP32 matmuls and cuDNN convolutions on or off; whether that changed it."""
    import torch

    was = torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    return was != on


def _set_cudnn_benchmark(on: bool) -> bool:
    import torch

    was = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    return was != on


def _tf32() -> None:
    _set_tf32(True)
    _did("torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True")
    _again_at_the_stepped_module(lambda: _set_tf32(True), "TF32")


def _cudnn_benchmark() -> None:
    _set_cudnn_benchmark(True)
    _did("torch.backends.cudnn.benchmark = True")
    _again_at_the_stepped_module(lambda: _set_cudnn_benchmark(True), "cudnn.benchmark")


def _again_at_the_stepped_module(switch_on: Callable[[], bool], flag: str) -> None:
    """A script that sets the flag itself during its setup (tc_fp32_no_tf32: `allow_tf32 = False`, Hugging
    Face's TrainingArguments(tf32=False)) undoes a flag set before it ran: on the H200 its verify run read
    60.3 ms a step before and after. The fix stands for the edit of that line, so the flag is set again when
    the stepped module is first called, after the setup; a script that switches it off inside its loop
    still reads `not applied`."""
    _on_stepped_module(
        lambda _module: (
            f"{flag} set again at the stepped module's first call: the script had switched it off"
            if switch_on()
            else ""
        )
    )


def _on_stepped_module(act: Callable[[Any], str]) -> None:
    """Call `act(module)` on the first module with parameters called outside any other module's call (the
    model the loop steps; a parameterless loss module is passed over), then stop watching. Global forward
    hooks, removed at that first call: eager module calls pay for them only until then."""
    import torch.nn.modules.module as nn_module

    depth = [0]
    handles: list[Any] = []

    def enter(module: Any, _args: Any) -> None:
        if depth[0] == 0 and handles and next(module.parameters(), None) is not None:
            for handle in handles:
                handle.remove()
            handles.clear()
            done = act(module)
            if done:
                _did(done)
            return
        depth[0] += 1

    def leave(_module: Any, _args: Any, _output: Any) -> None:
        depth[0] = max(0, depth[0] - 1)

    handles += [
        nn_module.register_module_forward_pre_hook(enter),
        nn_module.register_module_forward_hook(leave, always_call=True),
    ]


# What the compile fixes compiled, so `--paired` can run it eager and compiled again: the stepped module with
# its compiled call, and the stepped function's module-level names with their original and compiled targets.
_compiled_modules: list[tuple[Any, Any]] = []
_compiled_names: list[tuple[dict, str, Any, Any]] = []


def _set_compiled(on: bool) -> bool:
    """The stepped module (or function) the compile fix compiled runs compiled (on) or eager (off); whether
    that changed it. nn.Module.compile keeps the compiled call in `_compiled_call_impl`, which every call of
    the module takes while it is set; the compiled code stays cached, so switching back recompiles nothing."""
    changed = False
    for module, compiled_call in _compiled_modules:
        target = compiled_call if on else None
        if module._compiled_call_impl is not target:
            module._compiled_call_impl = target
            changed = True
    for namespace, name, original, compiled in _compiled_names:
        target = compiled if on else original
        if namespace.get(name) is not target:
            namespace[name] = target
            changed = True
    return changed


def _compile(mode: str | None) -> Callable[[], None]:
    def install() -> None:
        def act(module: Any) -> str:
            # nn.Module.compile compiles in place: every later call of this object, wherever the script
            # holds it, runs compiled (this first call finishes eager).
            module.compile(**({"mode": mode} if mode else {}))
            _compiled_modules.append((module, module._compiled_call_impl))
            return f"{type(module).__name__}.compile({f'mode={mode!r}' if mode else ''}) at its first call"

        _on_stepped_module(act)
        _on_stepped_function(lambda found: _compile_function(found, mode), lambda: bool(_compiled_modules))

    return install


def _on_stepped_function(act: Callable[[list[Called]], None], done_already: Callable[[], bool]) -> None:
    """Where the first step called no module with parameters (`done_already()` is False at its end), watch
    the second step (hybrid.inject.stepped_function) and call `act(what it called)` at its end."""
    session = active_session()
    if session is None:
        return
    watch = StepWatch(os.path.realpath(session.config.user_root or os.getcwd()))
    ends = [0]

    def at_step_end() -> bool:
        ends[0] += 1
        if ends[0] == 1:
            if done_already():
                return True
            watch.start()
            return False
        found = watch.stop()
        if not done_already():
            act(found)
        return True

    session.on_step_end(at_step_end)


def _compile_function(found: list[Called], mode: str | None) -> None:
    """Point every module-level name of the stepped function at its torch.compile'd form, from the next step
    on; the action is recorded at the first call through one of them, so a script that calls it some other
    way reads `not applied`."""
    import torch

    stepped = next((called for called in found if called.tensors), None)
    if stepped is None:
        _did(
            "no module with parameters, and no function of the script passing or returning tensors, was "
            "called in the step watched",
            taken=False,
        )
        return
    spent = f"{stepped.ns / 1e6:.3g} ms of the watched step over {stepped.calls} call(s)"
    target, names = bindings(stepped)
    if target is None:
        _did(
            f"{stepped.name}(), the script's function the step spends most time in ({spent}), is held by no "
            "module-level name the fix could point at its compiled form (a method, a closure, a local)",
            taken=False,
        )
        return
    compiled = torch.compile(target, mode=mode)
    action = (
        f"{stepped.name}() compiled with torch.compile({f'mode={mode!r}' if mode else ''}) after the second "
        f"step: the script's function the step spends most time in ({spent}), called through "
        + ", ".join(name for _namespace, name in names)
    )

    @functools.wraps(target)
    def compiled_call(*args: Any, **kwargs: Any) -> Any:
        _did(action)
        return compiled(*args, **kwargs)

    for namespace, name in names:
        _compiled_names.append((namespace, name, namespace[name], compiled_call))
        namespace[name] = compiled_call


def _autocast_bf16() -> None:
    import torch

    def act(module: Any) -> str:
        device = next(module.parameters()).device.type
        forward = module.forward

        @functools.wraps(forward)
        def autocast_forward(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast(device, dtype=torch.bfloat16):
                return forward(*args, **kwargs)

        module.forward = autocast_forward
        return f"{type(module).__name__}.forward under torch.autocast({device!r}, dtype=torch.bfloat16)"

    _on_stepped_module(act)


def _patch_data_loader(settings: Callable[[dict], dict]) -> None:
    """Every DataLoader the script builds gets `settings(its arguments)` on top of its own arguments."""
    from torch.utils.data import DataLoader, IterableDataset

    init = DataLoader.__init__
    signature = inspect.signature(init)

    @functools.wraps(init)
    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        given = dict(bound.arguments)
        if isinstance(given.get("dataset"), IterableDataset):
            # Each worker of an iterable dataset yields every item unless the dataset shards itself.
            _did(
                f"DataLoader over {type(given['dataset']).__name__}: an IterableDataset, whose workers would "
                "each yield every item",
                taken=False,
            )
        else:
            changed = settings(given)
            bound.arguments.update(changed)
            _did("DataLoader(" + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + ")")
        init(*bound.args, **bound.kwargs)

    DataLoader.__init__ = patched  # type: ignore[method-assign]


def _loader_workers(workers: int | None = None) -> None:
    """`workers` for every DataLoader built without (hybrid run --verify passes the count the finding chose
    from the run's fetch; default one a core this process may use, up to 4)."""
    import torch

    workers = workers or host_cpus.loader_worker_count(host_cpus.usable_cpus())

    def settings(given: dict) -> dict:
        out = {"num_workers": given.get("num_workers") or workers, "persistent_workers": True}
        if torch.cuda.is_available():
            out["pin_memory"] = True
        return out

    _patch_data_loader(settings)


def _loader_pin_memory() -> None:
    _patch_data_loader(lambda _given: {"pin_memory": True})


def _fused_optimizer() -> None:
    """Each torch.optim class with a fused implementation is built with fused=True (foreach left to it),
    where every parameter is on CUDA: a fused step on other devices fails on older torch."""
    import torch

    for cls in vars(torch.optim).values():
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
            continue
        init = vars(cls).get("__init__")
        if init is None or "fused" not in inspect.signature(init).parameters:
            continue
        _fuse(cls)


def _fuse(cls: type) -> None:
    init = vars(cls)["__init__"]

    @functools.wraps(init)
    def patched(self: Any, params: Any, *args: Any, **kwargs: Any) -> None:
        params = list(params)
        tensors = [
            p for item in params for p in (item.get("params", []) if isinstance(item, dict) else [item])
        ]
        if tensors and all(getattr(p, "is_cuda", False) for p in tensors):
            kwargs.update(fused=True, foreach=None)
            _did(f"{cls.__name__}(..., fused=True)")
        else:
            _did(f"{cls.__name__}: not every parameter is on CUDA", taken=False)
        init(self, params, *args, **kwargs)

    cls.__init__ = patched  # type: ignore[method-assign,misc]


# Fixes that are flags read at every call, or a compiled call the module takes while it is set, not objects
# the script builds: `--paired` switches them off and on again between steps of one process, so the step
# with and without the fix are timed in the same process. Two processes of one script differ by more than
# many fixes save: hf_trainer_gpt2 ran 16.6 to 18.5 ms a step in six processes on the H200, and its TF32 fix
# read 7.72 ms saved in one session and 1.94 ms in the next (benchmarks/results/s8_h200/hf_plain_window.txt).
# Not reduce-overhead: its CUDA graphs are recorded against the memory pool of the steps around them, and
# eager steps in between could make it record again inside a window.
TOGGLES: dict[str, Callable[[bool], bool]] = {
    "tf32": _set_tf32,
    "cudnn_benchmark": _set_cudnn_benchmark,
    "compile": _set_compiled,
}
# The paired windows after warmup, each as long: (fix on, settle steps). On, off, on: the off window sits at
# the on windows' mean time, so a drift linear in time (clocks, temperatures) weighs both settings alike, and
# the first on window is the plain window's steps with the fix on from the start, as in an unpaired run, so
# the loss at its last step compares with the plain run's (hybrid.analysis.verified.numerics). The first step
# after a switch is not timed: it carries the switch's own cost (cudnn.benchmark times every convolution
# algorithm at its first call).
PAIRED_ORDER = ((True, 0), (False, 1), (True, 1))


def paired_steps(segment_steps: int) -> int:
    """Steps the paired windows take after warmup, `segment_steps` timed in each."""
    return sum(settle + segment_steps for _on, settle in PAIRED_ORDER)


class _Paired:
    """Times the paired windows (PAIRED_ORDER) from the end of warmup, switching the fix at each window's
    start; each window's time runs between two device synchronizations, so it holds its steps' GPU work."""

    def __init__(self, toggle: Callable[[bool], bool], warmup: int, segment_steps: int) -> None:
        self.toggle = toggle
        self.warmup = warmup
        self.segment_steps = segment_steps
        self.segments: list[dict] = []
        self._settle_left = 0
        self._timed_left = 0
        self._start_ns = 0

    def at_step_end(self) -> bool:
        session = active_session()
        if session is None:
            return True
        if not self.segments:
            if session.steps_seen < self.warmup:
                return False
            return self._next()
        if self._settle_left:
            self._settle_left -= 1
            if not self._settle_left:
                self._start_ns = _synchronized_ns()
            return False
        self._timed_left -= 1
        if self._timed_left:
            return False
        end_ns = _synchronized_ns()
        self.segments[-1]["ms"] = (end_ns - self._start_ns) / 1e6
        return self._next()

    def _next(self) -> bool:
        """Start the next window; True (stop listening) after the last."""
        if len(self.segments) == len(PAIRED_ORDER):
            return True
        on, settle = PAIRED_ORDER[len(self.segments)]
        self.toggle(on)
        self.segments.append({"fix_on": on, "settle_steps": settle, "steps": self.segment_steps, "ms": None})
        self._settle_left, self._timed_left = settle, self.segment_steps
        if not settle:  # else the window's clock starts after its settle step
            self._start_ns = _synchronized_ns()
        return False


def _synchronized_ns() -> int:
    synchronize_device()
    return time.perf_counter_ns()


_paired: _Paired | None = None


FIXES: dict[str, Callable[..., None]] = {
    "tf32": _tf32,
    "cudnn_benchmark": _cudnn_benchmark,
    "autocast_bf16": _autocast_bf16,
    "compile": _compile(None),
    "compile_reduce_overhead": _compile("reduce-overhead"),
    "loader_workers": _loader_workers,
    "loader_pin_memory": _loader_pin_memory,
    "fused_optimizer": _fused_optimizer,
}


def apply(
    name: str, options: dict | None = None, *, paired_after: int | None = None, segment_steps: int = 0
) -> None:
    """Switch fix `name` on (a key of FIXES, given `options`) for the rest of this process; for a fix in
    TOGGLES with `paired_after` (the warmup steps), time the paired windows of `segment_steps` steps after
    them."""
    global _fix, _paired
    _fix = name
    FIXES[name](**(options or {}))
    if paired_after is None:
        return
    session = active_session()
    if session is None:  # hybrid.inject.script begins its session first
        return
    _paired = _Paired(TOGGLES[name], paired_after, segment_steps)
    session.on_step_end(_paired.at_step_end)


def write(out_dir: Path) -> None:
    """OUT/fix.json: the fix and what it did (nothing, where the script never built what it acts on)."""
    if _fix is None:
        return
    partial = out_dir / (FIX_FILE + ".partial")
    record: dict[str, Any] = {"fix": _fix, "actions": _actions, "left_as_built": _passed_over}
    if _paired is not None:
        record["paired"] = {"warmup": _paired.warmup, "segments": _paired.segments}
    partial.write_text(json.dumps(record, indent=1))
    os.replace(partial, out_dir / FIX_FILE)
