"""The script's own function that a step spends most of its time in, for the compile fixes of `hybrid run
--verify` where the step calls no module with parameters: benchmarks/planted/graph_unfused_small_ops calls a
plain `mlp_layer(h, *weights)` twelve times a step from its loop, and on the H200 its compile fixes read "not
applied: the script built nothing the fix acts on".

One whole step is watched with sys.setprofile (a callback on every Python call of that step, during warmup
only, then removed). The outermost calls from the user's code into the user's code are timed, with whether
they pass or return tensors; the stepped function is the one of those with the most time in the step.

Standard library and torch only: it runs inside the profiled process (hybrid.inject.apply_fix)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from types import CodeType, FrameType, FunctionType, MethodType
from typing import Any

from hybrid.inject.step_finder import is_user_file


@dataclass
class Called:
    """One function of the user's, called from the user's code in the watched step, outside any other such
    call."""

    code: CodeType
    name: str  # its qualified name
    namespaces: list[dict]  # its module's globals, then its caller's, where the names that call it live
    calls: int = 0
    ns: int = 0  # wall time inside it over the step
    tensors: bool = False  # a call took a tensor argument or returned a tensor


class StepWatch:
    """Times the outermost user-to-user calls between start() and stop()."""

    def __init__(self, user_root: str) -> None:
        self._user_root = user_root
        self._user_files: dict[str, bool] = {}
        self._called: dict[CodeType, Called] = {}
        self._open: FrameType | None = None
        self._opened_ns = 0
        self._previous: Any = None

    def start(self) -> None:
        self._previous = sys.getprofile()
        sys.setprofile(self._event)

    def stop(self) -> list[Called]:
        """The calls seen, the most time first (a call still open at the step's end counts up to now)."""
        sys.setprofile(self._previous)
        if self._open is not None:
            self._close(None)
        return sorted(self._called.values(), key=lambda called: -called.ns)

    def _is_user(self, code: CodeType) -> bool:
        known = self._user_files.get(code.co_filename)
        if known is None:
            known = self._user_files[code.co_filename] = is_user_file(code.co_filename, self._user_root)
        return known

    def _event(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "return" and frame is self._open:
            self._close(arg)
            return
        if event != "call" or self._open is not None:
            return
        caller = frame.f_back
        code = frame.f_code
        if caller is None or not self._is_user(code) or not self._is_user(caller.f_code):
            return
        called = self._called.get(code)
        if called is None:
            called = self._called[code] = Called(
                code, getattr(code, "co_qualname", code.co_name), [frame.f_globals, caller.f_globals]
            )
        called.calls += 1
        called.tensors = called.tensors or any(_has_tensor(value) for value in frame.f_locals.values())
        self._open, self._opened_ns = frame, time.perf_counter_ns()

    def _close(self, returned: Any) -> None:
        assert self._open is not None
        called = self._called[self._open.f_code]
        called.ns += time.perf_counter_ns() - self._opened_ns
        called.tensors = called.tensors or _has_tensor(returned)
        self._open = None


def _has_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if isinstance(value, (tuple, list)):
        return any(isinstance(item, torch.Tensor) for item in value)
    return isinstance(value, torch.Tensor)


def bindings(called: Called) -> tuple[Any, list[tuple[dict, str]]]:
    """The object the script calls the function through (the decorated one where a decorator wraps it, as
    functools.wraps records in `__wrapped__`; a bound method) and every module-level name bound to it;
    (None, []) where no module-level name holds it (a method looked up on its object at each call, a
    closure, a local variable)."""
    found: Any = None
    names: list[tuple[dict, str]] = []
    seen: set[int] = set()
    for namespace in called.namespaces:
        if id(namespace) in seen:
            continue
        seen.add(id(namespace))
        for name, value in list(namespace.items()):
            if _runs(value, called.code) and (found is None or value is found):
                found = value
                names.append((namespace, name))
    return found, names


def _runs(value: Any, code: CodeType) -> bool:
    """Whether calling `value` runs `code`: its own code, or that of a function it wraps."""
    if isinstance(value, MethodType):  # `step = trainer.step` at module level
        value = value.__func__
    for _depth in range(8):  # a chain of decorators, not an endless one
        if not isinstance(value, FunctionType):
            return False  # no attribute look-ups on other objects: a lazy module would import on them
        if value.__code__ is code:
            return True
        value = getattr(value, "__wrapped__", None)
    return False
