"""Finds the step unit of a script that has no optimizer and no marks, while it runs, and then marks
each step in that unit (`mark(source)`), so the session can open its collector around the measured
steps and stop the script after them.

Two detectors watch from the start of the script:
- top-level module calls (hybrid.inject.module_calls): the same module called CONSECUTIVE_CALLS times at the
  top level with no back-edge of a user loop in between is the unit: one forward per step, e.g. one
  decode step of `generate()` (the report says how many per generate() call);
- the script's own loops (hybrid.inject.loop_trace): the outermost loop of the user's code whose iterations
  do tensor work is the unit. An iteration did tensor work when it made a top-level forward, a CUDA
  allocation, or bound a new tensor to a variable of the loop's frame (`a = (a @ w).tanh()`; this
  also works on a CPU). A loop nested in another is chosen when the outer loop completes no
  iteration within INNER_WAIT of its iterations (epochs x batches: the batch).
The first detector to decide wins; the other stops. Neither decides while an optimizer exists that
has not stepped yet (its step hook is the stronger source), unless OPTIMIZER_PATIENCE units pass.

Torch-light: torch is imported by the session before the script runs; no pandas.
"""

from __future__ import annotations

import ast
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from hybrid.inject.loop_trace import TRACER_NAME, USE_MONITORING, Loop, LoopTracer
from hybrid.inject.module_calls import TopLevelCalls, module_label

SOURCE_MODULE = "module_call"
SOURCE_LOOP = "script_loop"

CONSECUTIVE_CALLS = 3
JUDGED_ITERATIONS = 2  # iterations seen whole (between two back-edges) that must have done work
INNER_WAIT = 16
OPTIMIZER_PATIENCE = 16
IDLE_ITERATIONS = 8  # a loop whose first judged iterations all did no tensor work is never the step

_LIBRARY_MARKERS = ("site-packages", "dist-packages", f"{os.sep}lib{os.sep}python")


@dataclass
class _LoopStats:
    back_edges: int = 0
    working: int = 0  # judged iterations that did work
    parent: Loop | None = None
    last: tuple[int, int, int] | None = None  # (time ns, forwards so far, CUDA allocations so far)
    tensors: dict[str, int] = field(default_factory=dict)  # id of each tensor bound in the loop's frame
    forwards_per_iteration: list[int] = field(default_factory=list)
    signals: set[str] = field(default_factory=set)


class StepFinder:
    def __init__(
        self, mark: Callable[[str], None], user_root: str, optimizer_pending: Callable[[], bool]
    ) -> None:
        self._mark = mark
        self._user_root = os.path.realpath(user_root)
        self._optimizer_pending = optimizer_pending
        self._user_files: dict[str, bool] = {}
        self._loops: dict[Loop, _LoopStats] = {}
        self._forwards = 0
        self._consecutive: tuple[int, int] = (0, 0)  # (id of the module, calls in a row)
        self._top_modules: dict[int, Any] = {}  # every module seen called at the top level, by id
        self._count_by_module = False  # a script_loop step counted at its one forward's end
        self._callers: list[int] = []  # top-level forwards per call of the library function (generate)
        self._caller: FrameType | None = None
        self._caller_name: str | None = None
        self.source: str | None = None
        self.unit: str | None = None
        self.reason: str | None = None
        self.confidence: str | None = None
        self.loop: Loop | None = None
        self.module: Any = None
        self.started_ns = 0
        self.running = False
        self.decided_ns: int | None = None
        self.calls = TopLevelCalls(self._on_forward, self._is_user_frame, lambda: True)
        self.tracer = LoopTracer(self._is_user_code, self._on_back_edge, lambda: self.calls.depth > 0)

    # -- control ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.started_ns = time.perf_counter_ns()
        self.calls.start()
        self.tracer.start()
        self.running = True

    def stop(self) -> None:
        self.calls.stop()
        self.tracer.stop()
        self.running = False

    @property
    def deciding(self) -> bool:
        return self.source is None

    def facts(self) -> dict:
        """What the detectors saw, for inject.json."""
        per_call = None
        if self._caller_name and self._callers:
            # The last call may have been cut short by the step limit: only calls seen to their end count.
            complete = self._callers[:-1]
            per_call = {
                "function": self._caller_name,
                "calls_seen": len(self._callers),
                "complete": bool(complete),
                "forwards": sorted(complete)[len(complete) // 2] if complete else self._callers[-1],
            }
        return {
            "tracer": TRACER_NAME,
            "python": sys.version.split()[0],
            "decided_after_s": (
                round((self.decided_ns - self.started_ns) / 1e9, 3) if self.decided_ns else None
            ),
            "per_call": per_call,
            "loops_seen": len(self._loops),
        }

    # -- user code -------------------------------------------------------------------------------

    def _is_user_file(self, filename: str) -> bool:
        known = self._user_files.get(filename)
        if known is None:
            known = is_user_file(filename, self._user_root)
            self._user_files[filename] = known
        return known

    def _is_user_code(self, code: CodeType) -> bool:
        return self._is_user_file(code.co_filename)

    def _is_user_frame(self, frame: FrameType) -> bool:
        return self._is_user_file(frame.f_code.co_filename)

    # -- module calls ----------------------------------------------------------------------------

    def _on_forward(self, module: Any, caller: FrameType | None) -> None:
        self._forwards += 1
        if caller is not None:
            if caller is self._caller:
                self._callers[-1] += 1
            else:
                self._caller = caller
                self._caller_name = caller.f_code.co_name
                self._callers.append(1)
        if self.source == SOURCE_MODULE or (self.source == SOURCE_LOOP and self._count_by_module):
            self._mark(self.source)
            return
        if self.source is not None:
            return
        key = id(module)
        self._top_modules.setdefault(key, module)
        calls = self._consecutive[1] + 1 if self._consecutive[0] == key else 1
        self._consecutive = (key, calls)
        if calls >= (OPTIMIZER_PATIENCE if self._optimizer_pending() else CONSECUTIVE_CALLS):
            label = module_label(module)
            self._decide(
                SOURCE_MODULE,
                f"one top-level {label}.forward",
                f"{label}.forward was called {calls} times in a row at the top level (no other "
                "module around it, no iteration of the script's own loop in between)",
                "medium",
            )
            self.module = module
            self.tracer.stop()
            self.calls.narrow(module, caller)
            self._mark(SOURCE_MODULE)

    # -- loops -----------------------------------------------------------------------------------

    def _on_back_edge(self, loop: Loop, frame: FrameType) -> None:
        if self.source == SOURCE_LOOP:
            if loop is self.loop:
                self._mark(SOURCE_LOOP)
            return
        if self.source is not None:
            return
        self._consecutive = (0, 0)
        stats = self._loops.setdefault(loop, _LoopStats())
        judged = len(stats.forwards_per_iteration)
        if judged >= IDLE_ITERATIONS and not stats.working:
            return  # bookkeeping: not worth a look per iteration any more
        now = (time.perf_counter_ns(), self._forwards, _cuda_allocations())
        tensors = _tensor_ids(frame)
        if stats.last is not None:
            forwards, allocations = now[1] - stats.last[1], now[2] - stats.last[2]
            stats.forwards_per_iteration.append(forwards)
            rebound = any(stats.tensors.get(name) != ident for name, ident in tensors.items())
            signals = {
                name
                for name, hit in (
                    ("module call", forwards),
                    ("CUDA allocation", allocations > 0),
                    ("new tensor bound in the loop", rebound),
                )
                if hit
            }
            stats.signals |= signals
            stats.working += bool(signals)
        stats.last, stats.tensors = now, tensors
        stats.back_edges += 1
        stats.parent = self._enclosing(loop, frame)
        if stats.parent is not None:
            outer = self._loops.setdefault(stats.parent, _LoopStats())
            if outer.last is None:
                # The outer loop's first iteration began before this inner loop first came round:
                # that is as close to its start as can be seen, so its first iteration is judged too.
                outer.last = (stats.last[0] - 1, 0, -1 if stats.last[2] < 0 else 0)
        need = OPTIMIZER_PATIENCE if self._optimizer_pending() else JUDGED_ITERATIONS
        if stats.working < need:
            return
        parent = stats.parent
        if parent is not None and stats.back_edges <= INNER_WAIT:
            return  # the enclosing loop may be the step: see whether it completes iterations soon
        if parent is not None:
            outer = f"{_where(parent)}"
            why = (
                f"iterations of the loop at {_where(loop)} did work; the loop around it at {outer} "
                f"completed no iteration within {INNER_WAIT} of them, so the inner loop is the step"
            )
        else:
            inner = [
                other
                for other, other_stats in self._loops.items()
                if other_stats.parent is loop and other_stats.back_edges
            ]
            why = "outermost loop of the script whose iterations did work" + (
                f" (each runs the loop at {_where(inner[0])})" if inner else ""
            )
        self._decide(
            SOURCE_LOOP,
            f"one iteration of the loop at {_where(loop)}",
            f"{why}; {self._signal(stats)}",
            "medium",
        )
        self.loop = loop
        if not USE_MONITORING and len(self._top_modules) == 1 and set(stats.forwards_per_iteration) == {1}:
            # Each iteration calls the one model once: count at that forward's end, through one hook on
            # the model, instead of paying sys.settrace's callback on every Python call of the step.
            self._count_by_module = True
            self.tracer.stop()
            self.calls.narrow(next(iter(self._top_modules.values())), None)
            self.reason = f"{self.reason}; counted at the end of that call"
        else:
            self.calls.stop()
            self.tracer.narrow(loop)
        self._mark(SOURCE_LOOP)

    def _signal(self, stats: _LoopStats) -> str:
        if any(stats.forwards_per_iteration):
            counts = sorted(stats.forwards_per_iteration)
            return f"{counts[len(counts) // 2]} top-level module call(s) per iteration"
        return "tensor work seen: " + ", ".join(sorted(stats.signals))

    def _enclosing(self, loop: Loop, frame: FrameType) -> Loop | None:
        """The innermost loop around `loop`: in the same function, else in the user's calling frames."""
        current: FrameType | None = frame
        while current is not None:
            if self._is_user_frame(current):
                offset = current.f_lasti
                around = [
                    other
                    for other in self.tracer.loops_in(current.f_code).values()
                    if other is not loop
                    and other.start_offset <= offset <= other.end_offset
                    and (current is not frame or other.encloses(loop))
                ]
                if around:
                    return max(around, key=lambda other: other.start_offset)
            current = current.f_back
        return None

    def _decide(self, source: str, unit: str, reason: str, confidence: str) -> None:
        self.source, self.unit, self.reason, self.confidence = source, unit, reason, confidence
        self.decided_ns = time.perf_counter_ns()


_OWN_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # hybrid's own package


def is_user_file(filename: str, user_root: str) -> bool:
    """Whether code from `filename` is the user's: under `user_root` (a real path), neither hybrid's own nor
    an installed library's."""
    path = os.path.realpath(filename) if not filename.startswith("<") else ""
    return (
        bool(path)
        and path.startswith(user_root + os.sep)
        and not path.startswith(_OWN_ROOT)
        and not any(marker in path for marker in _LIBRARY_MARKERS)
    )


def _where(loop: Loop) -> str:
    return f"{os.path.basename(loop.code.co_filename)}:{loop.top_line}"


def _tensor_ids(frame: FrameType) -> dict[str, int]:
    """{variable: id} of the tensors bound in a frame (a module's globals for module-level code)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    tensor = torch.Tensor
    return {name: id(value) for name, value in frame.f_locals.items() if isinstance(value, tensor)}


def _cuda_allocations() -> int:
    """CUDA allocations made so far on the current device (the caching allocator's counter); -1
    when CUDA is not in use. Read only while the unit is being found: the call costs tens of us."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return -1
    try:
        stats = torch._C._cuda_memoryStats(torch.cuda.current_device())
        return int(stats["allocation"]["all"]["allocated"])
    except (AttributeError, KeyError, RuntimeError, TypeError):
        return -1


def script_marks_steps(path: str) -> bool:
    """Whether the script's own source calls `mark_step()` or `hybrid.step()` (a call, not a mention: the
    name in a comment or a string does not count; `_planted.mark_step()`, a helper that forwards to hybrid's,
    does). An unreadable or unparsable script counts as unmarked: the detectors then find its steps."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "mark_step":
            return True
        if isinstance(func, ast.Attribute) and func.attr == "mark_step":
            return True
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "step"
            and isinstance(func.value, ast.Name)
            and func.value.id == "hybrid"
        ):
            return True
    return False
