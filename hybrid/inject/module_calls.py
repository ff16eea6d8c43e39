"""Top-level nn.Module calls: a module's forward that is not nested in another module's call, on the
script's main thread (for `model.generate()`, one decode step).

While the unit is being found, global forward pre/post hooks track the module call depth; once a
module is chosen, `narrow(module)` replaces them by one post-hook on that module alone, so the other
modules run without hooks again. Inside torch.compile's tracing the hooks do nothing (they would
otherwise be traced into the graph).

torch is imported by the caller (hybrid.inject.stepping imports it before the user's code runs).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

# Frames between a user's call and the library function it called that only wrap it
# (torch.no_grad() as a decorator, functools.wraps wrappers).
WRAPPER_NAMES = frozenset(
    {"decorate_context", "wrapper", "wrapped", "inner", "_fn", "__call__", "_wrapped_call_impl", "_call_impl"}
)


# A module called while a DataLoader builds a batch in this process (a transform such as torchvision's Resize,
# in the dataset's __getitem__) prepares input: it is not the workload's forward. A FakeData eval loop was
# stepped on Resize.forward, 64 calls a batch, and its 2 ms "step" left the model out.
DATA_FETCH_FILE = os.path.join("torch", "utils", "data", "_utils", "fetch.py")


def _in_data_fetch(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.endswith(DATA_FETCH_FILE):
            return True
        frame = frame.f_back
    return False


def module_label(module: Any) -> str:
    """The class name a user knows: a torch.compile'd module is its original module's class."""
    original = getattr(module, "_orig_mod", None)
    return type(original if original is not None else module).__name__


class TopLevelCalls:
    """Calls `on_forward(module, caller)` at the end of every top-level forward. `caller` is the
    frame of the library function that the user's code called and that made the forward (generate()),
    or None when the user's code called the module itself; it is looked up only while `want_caller()`."""

    def __init__(
        self,
        on_forward: Callable[[Any, FrameType | None], None],
        is_user_frame: Callable[[FrameType], bool],
        want_caller: Callable[[], bool],
    ) -> None:
        self._on_forward = on_forward
        self._is_user_frame = is_user_frame
        self._want_caller = want_caller
        self._thread = threading.get_ident()
        self._hooks: list[Any] = []
        self._global_hooks: list[Any] = []
        self._inert = False  # global hooks left installed but doing nothing (see stop())
        self._caller: FrameType | None = None
        # Where the caller's frame lies above the hook's caller (module._call_impl), once known: after
        # narrow() the caller is found by sys._getframe(depth) alone, without walking the stack.
        self._caller_depth: int | None = None
        self._last_caller_depth: int | None = None
        self.depth = 0
        self._fetch_depth = 0  # module calls open inside a DataLoader's batch fetch (not counted)

    def start(self) -> None:
        global _is_compiling
        import torch
        import torch.nn.modules.module as nn_module

        _is_compiling = torch.compiler.is_compiling
        self._global_hooks = [
            nn_module.register_module_forward_pre_hook(self._pre),
            # always_call: the depth stays right when a forward raises.
            nn_module.register_module_forward_hook(self._post, always_call=True),
        ]

    def narrow(self, module: Any, caller: FrameType | None) -> None:
        """Only `module`'s own calls from now on (it was seen at the top level, called from `caller`)."""
        self.stop()
        self.depth = 0
        self._caller_depth = self._last_caller_depth if caller is not None else None
        self._hooks = [module.register_forward_hook(self._post_chosen, always_call=True)]

    def stop(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        if _dynamo_compiled():
            # torch.compile guards its graphs on the number of global hooks: removing ours would
            # recompile every compiled model once more (seconds each). They stay, doing nothing.
            self._inert = True
            return
        for handle in self._global_hooks:
            handle.remove()
        self._global_hooks = []

    # Each hook asks torch.compiler.is_compiling() first: while dynamo traces a compiled module, that
    # call is a constant True and the hook traces to nothing; anything else (threading.get_ident) would
    # be a graph break in the user's model.
    def _pre(self, module: Any, args: Any) -> None:
        if _is_compiling() or self._inert or threading.get_ident() != self._thread:
            return
        if self._fetch_depth or (self.depth == 0 and _in_data_fetch(sys._getframe(1))):
            self._fetch_depth += 1
            return
        if self.depth == 0 and self._want_caller():
            call_impl = sys._getframe(1)
            self._caller = self.caller_frame(call_impl)
            depth, frame = 0, call_impl
            while frame is not None and frame is not self._caller:
                depth, frame = depth + 1, frame.f_back
            self._last_caller_depth = depth if frame is not None else None
        self.depth += 1

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if _is_compiling() or self._inert or threading.get_ident() != self._thread:
            return
        if self._fetch_depth:
            self._fetch_depth -= 1
            return
        if self.depth == 0:
            return
        self.depth -= 1
        if self.depth == 0:
            self._on_forward(module, self._caller)

    def _post_chosen(self, module: Any, args: Any, output: Any) -> None:
        if _is_compiling() or threading.get_ident() != self._thread:
            return
        caller = None
        if self._caller_depth is not None:
            try:
                caller = sys._getframe(self._caller_depth + 1)  # + 1: this hook's own frame
            except ValueError:  # called from a shallower stack than the first time
                caller = None
        self._on_forward(module, caller)

    def caller_frame(self, frame: FrameType | None) -> FrameType | None:
        """The outermost non-wrapper library frame below the innermost user frame, walking out from
        `frame`; None when the user's frame called the module directly."""
        below: FrameType | None = None
        while frame is not None and not self._is_user_frame(frame):
            if frame.f_code.co_name not in WRAPPER_NAMES:
                below = frame
            frame = frame.f_back
        return below if frame is not None else None


def _dynamo_compiled() -> bool:
    """Whether torch.compile has compiled a frame in this process so far."""
    utils = sys.modules.get("torch._dynamo.utils")
    return bool(utils is not None and utils.counters["stats"].get("unique_graphs"))


def _is_compiling() -> bool:
    return False  # replaced by torch.compiler.is_compiling in start(), which imports torch
