"""Back-edges of the loops in the user's own code, seen from inside the profiled process.

A loop is keyed by (code object, top line): the first line of the bytecode range its backward jump
spans (the `for`/`while` line, or the first body line of `while True:`). Only the user's code is
watched, decided once per code object by `is_user_code`:

- Python 3.12+: `sys.monitoring`. PY_START is enabled globally only to meet each code object once
  (DISABLE turns it off for that code for good); JUMP events are then enabled locally on the user's
  code objects that contain a loop, so the rest of the program runs at full speed.
- Python 3.10/3.11: `sys.settrace`. The global function is called on every Python call and returns a
  line tracer only for the user's frames with a loop. Its cost is one Python callback per Python
  call (about 1 us each on a loaded CI core; measured in tests/test_step_detect.py), so `narrow()`
  keeps only the chosen loop's frames traced once the unit is decided, and tracing pauses while an
  import runs (`builtins.__import__` is wrapped): a lazy import of torch._dynamo alone executes
  millions of calls, and no loop of the user's runs inside an import.

Standard library only: this runs inside the profiled process before the user's code.
"""

from __future__ import annotations

import ast
import builtins
import dis
import functools
import linecache
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType

USE_MONITORING = sys.version_info >= (3, 12)
TRACER_NAME = "sys.monitoring" if USE_MONITORING else "sys.settrace"


@dataclass(frozen=True)
class Loop:
    code: CodeType
    top_line: int
    start_offset: int  # the backward jump's target
    end_offset: int  # the backward jump itself
    lines: frozenset  # lines of the instructions in [start_offset, end_offset]

    @property
    def where(self) -> str:
        return f"{self.code.co_filename}:{self.top_line}"

    def encloses(self, other: Loop) -> bool:
        return (
            other.code is self.code
            and other is not self
            and self.start_offset <= other.start_offset
            and other.end_offset <= self.end_offset
        )


# A comprehension's loop is never the step: it builds a value (a list of CUDA tensors before the real loop,
# seen stepped on as "the loop at line 6" on the H200). Python 3.12 inlines comprehensions into the
# enclosing code (PEP 709), so their back-edges look like a `for` statement's; 3.10/3.11 give them code
# objects of their own, and generator expressions keep theirs everywhere.
_COMPREHENSION_CODE = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})
_COMPREHENSION_APPENDS = frozenset({"LIST_APPEND", "SET_ADD", "MAP_ADD"})


@functools.lru_cache(maxsize=256)
def statement_loop_lines(filename: str) -> frozenset[int] | None:
    """Lines a `for`/`while` statement's loop can be keyed by: its header lines, and for a `while` also
    its first body line (`while True:` jumps back there). None when the source cannot be read."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return None
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return None
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and node.body:
            last = (
                node.body[0].lineno
                if isinstance(node, ast.While)
                else max(node.lineno, node.body[0].lineno - 1)
            )
            lines.update(range(node.lineno, last + 1))
    return frozenset(lines)


def _is_comprehension(loop_instructions: list[dis.Instruction], nested: list[tuple[int, int]]) -> bool:
    """An inlined comprehension appends to its result in its own body, outside any loop nested in it."""
    return any(
        i.opname in _COMPREHENSION_APPENDS and not any(s <= i.offset <= e for s, e in nested)
        for i in loop_instructions
    )


def loops_of(code: CodeType) -> dict[int, Loop]:
    """The `for`/`while` statement loops of one code object (not of the functions nested in it, and never
    a comprehension's), by backward-jump target."""
    if code.co_name in _COMPREHENSION_CODE:
        return {}
    loops = _back_edge_loops(code)
    headers = statement_loop_lines(code.co_filename)
    instructions = list(dis.get_instructions(code))
    kept = {}
    for target, loop in loops.items():
        if headers is not None and loop.top_line not in headers:
            continue
        nested = [(other.start_offset, other.end_offset) for other in loops.values() if loop.encloses(other)]
        body = [i for i in instructions if loop.start_offset <= i.offset <= loop.end_offset]
        if not _is_comprehension(body, nested):
            kept[target] = loop
    return kept


def _back_edge_loops(code: CodeType) -> dict[int, Loop]:
    instructions = list(dis.get_instructions(code))
    offsets = [i.offset for i in instructions]
    line_at: dict[int, int] = {}
    line = code.co_firstlineno
    for instruction in instructions:
        # positions.lineno where present (3.11+); starts_line otherwise (3.10).
        positions = getattr(instruction, "positions", None)
        start = positions.lineno if positions is not None and positions.lineno else instruction.starts_line
        if isinstance(start, int) and start > 0:
            line = start
        line_at[instruction.offset] = line
    loops: dict[int, Loop] = {}
    for instruction in instructions:
        target = instruction.argval if isinstance(instruction.argval, int) else None
        if target is None or "JUMP" not in instruction.opname or target >= instruction.offset:
            continue
        span = [line_at[o] for o in offsets if target <= o <= instruction.offset]
        previous = loops.get(target)
        end = max(instruction.offset, previous.end_offset if previous else 0)
        lines = frozenset(line_at[o] for o in offsets if target <= o <= end)
        loops[target] = Loop(code, min(span + ([previous.top_line] if previous else [])), target, end, lines)
    return loops


BackEdge = Callable[[Loop, FrameType], None]


class LoopTracer:
    """Calls `on_back_edge(loop, frame)` on every back-edge of a loop in the user's code, on the
    thread that started it (the script's main thread), while `suppressed()` is false."""

    def __init__(
        self,
        is_user_code: Callable[[CodeType], bool],
        on_back_edge: BackEdge,
        suppressed: Callable[[], bool] = lambda: False,
    ) -> None:
        self._is_user_code = is_user_code
        self._on_back_edge = on_back_edge
        self._suppressed = suppressed
        self._loops: dict[CodeType, dict[int, Loop]] = {}
        self._only: Loop | None = None
        self._thread = threading.get_ident()
        self._tool: int | None = None
        self._import = builtins.__import__
        self._importing = False
        self.running = False

    def loops_in(self, code: CodeType) -> dict[int, Loop]:
        found = self._loops.get(code)
        if found is None:
            found = self._loops[code] = loops_of(code) if self._is_user_code(code) else {}
        return found

    # -- control ---------------------------------------------------------------------------------

    def start(self) -> None:
        if USE_MONITORING:
            self._start_monitoring()
        else:
            sys.settrace(self._on_call)  # this thread only: the script's loop runs on its main thread
            builtins.__import__ = self._untraced_import
        self.running = True

    def narrow(self, loop: Loop) -> None:
        """From now on, watch only `loop` (the chosen step unit)."""
        self._only = loop
        if USE_MONITORING and self._tool is not None:
            monitoring = sys.monitoring
            monitoring.set_events(self._tool, 0)  # no new code to meet: the loop's code is instrumented
            for code in self._loops:
                if code is not loop.code and self._loops[code]:
                    monitoring.set_local_events(self._tool, code, 0)

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        if USE_MONITORING and self._tool is not None:
            monitoring = sys.monitoring
            monitoring.set_events(self._tool, 0)
            for code, loops in self._loops.items():
                if loops:
                    monitoring.set_local_events(self._tool, code, 0)
            monitoring.register_callback(self._tool, monitoring.events.PY_START, None)
            monitoring.register_callback(self._tool, monitoring.events.JUMP, None)
            monitoring.free_tool_id(self._tool)
            self._tool = None
        else:
            if builtins.__import__ == self._untraced_import:
                builtins.__import__ = self._import
            if sys.gettrace() == self._on_call:  # a bound method: equal, never identical
                sys.settrace(None)

    # -- sys.monitoring (3.12+) ------------------------------------------------------------------

    def _start_monitoring(self) -> None:
        monitoring = sys.monitoring
        for tool in (4, 3, 2):  # 0, 1 and 5 are the debugger's, coverage's and the optimizer's
            if monitoring.get_tool(tool) is None:
                break
        else:
            raise RuntimeError("no free sys.monitoring tool id")
        monitoring.use_tool_id(tool, "hybrid-steps")
        self._tool = tool
        monitoring.register_callback(tool, monitoring.events.PY_START, self._on_start)
        monitoring.register_callback(tool, monitoring.events.JUMP, self._on_jump)
        monitoring.set_events(tool, monitoring.events.PY_START)

    def _on_start(self, code: CodeType, offset: int) -> object:
        # A function first started inside a module's forward (a model's `for block in self.blocks`) is
        # part of a step, never the step itself: it is not instrumented.
        if not self._suppressed() and self.loops_in(code) and self._tool is not None:
            sys.monitoring.set_local_events(self._tool, code, sys.monitoring.events.JUMP)
        return sys.monitoring.DISABLE

    def _on_jump(self, code: CodeType, source: int, destination: int) -> object:
        if destination >= source or threading.get_ident() != self._thread:
            return None
        loop = self._loops.get(code, {}).get(destination)
        if loop is None or (self._only is not None and loop is not self._only) or self._suppressed():
            return None
        self._on_back_edge(loop, sys._getframe(1))
        return None

    # -- sys.settrace (3.10, 3.11) ---------------------------------------------------------------

    def _untraced_import(
        self,
        name: str,
        globals: dict | None = None,
        locals: dict | None = None,
        fromlist: tuple = (),
        level: int = 0,
    ) -> object:
        if self._importing or threading.get_ident() != self._thread or sys.gettrace() != self._on_call:
            return self._import(name, globals, locals, fromlist, level)
        self._importing = True
        sys.settrace(None)
        try:
            return self._import(name, globals, locals, fromlist, level)
        finally:
            self._importing = False
            if self.running:
                sys.settrace(self._on_call)

    def _on_call(self, frame: FrameType, event: str, arg: object):
        code = frame.f_code
        if self._only is not None:
            if code is not self._only.code:
                return None
        elif not self.loops_in(code) or self._suppressed():
            return None
        loops = self._loops[code]
        by_line: dict[int, list[Loop]] = {}
        for loop in loops.values():
            if self._only is None or loop is self._only:
                by_line.setdefault(loop.top_line, []).append(loop)
        last_line = [frame.f_lineno]

        def on_line(frame: FrameType, event: str, arg: object):
            if event != "line":
                return on_line
            line = frame.f_lineno
            previous, last_line[0] = last_line[0], line
            candidates = by_line.get(line)
            if candidates and previous > line:
                for loop in candidates:
                    if previous in loop.lines and not self._suppressed():
                        self._on_back_edge(loop, frame)
                        break
            return on_line

        frame.f_trace_lines = True
        return on_line
