"""Step marking and collector control inside the profiled process.

A `StepSession` counts the user's training/inference steps, skips the warmup steps, opens the
collector of its pass for exactly the measured steps, times that window, writes
`OUT/inject.json`, and stops the script at the step limit. The injector (`hybrid.inject.script`) and the
in-process API both drive it.

Steps come from the strongest source that fires, without edits to the user's script:
  1. explicit marks: `hybrid.mark_step()` / `with hybrid.step():`, torch.profiler's `prof.step()` (the
     script's own profilers are kept inert meanwhile: hybrid.inject.user_profiler);
  2. a global optimizer step post-hook;
  3. with `detect` on (the injector), hybrid.inject.step_finder: repeated top-level module calls, else the
     script's own outermost working loop.
Warmup lasts at least `warmup_steps`, then until step times settle (hybrid.load.settle). Outside a session
mark_step() and step() do nothing, so a script runs unchanged without hybrid.

torch is imported lazily: `import hybrid` must stay cheap and must not touch CUDA.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback as traceback_module
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from hybrid import host_cpus
from hybrid.errors import UsageError
from hybrid.inject import run_config
from hybrid.inject.gc_watch import GcWatch
from hybrid.inject.loader_watch import LoaderWatch
from hybrid.inject.nvtx_ranges import RangeStack
from hybrid.inject.user_profiler import UserProfilers
from hybrid.load import settle
from hybrid.markers import (  # the names the loaders read back, in one home
    INJECT_FILE,
    MODULE_DOMAIN,
    OP_FLOPS_FILE,
    STEP_DOMAIN,
    TORCH_STEP_PREFIX,
    TRACE_FILE,
)

PASSES = ("plain", "torch", "nsys", "ncu")
NVTX_PASSES = ("nsys", "ncu")  # passes whose collector reads NVTX ranges

MODULE_NAME_ATTR = "_hybrid_qualified_name"

# step_source values in inject.json (hybrid.inject.step_finder adds "module_call" and "script_loop")
SOURCE_OPTIMIZER = "optimizer_hook"
SOURCE_MARK = "mark_step"
SOURCE_PROFILER_STEP = "profiler_step"  # the script's own torch.profiler.profile.step()
SOURCE_NONE = "none"
EXPLICIT_SOURCES = (SOURCE_MARK, SOURCE_PROFILER_STEP)
DETECTED_SOURCES = ("module_call", "script_loop")
# How sure the session is that its steps are the script's steps (inject.json step_confidence, also
# results.json workload.step_confidence): high for marks and the optimizer hook; the detectors say.
CONFIDENCE_HIGH = "high"

# Outcomes in inject.json
COMPLETED = "completed"
STEP_LIMIT = "step_limit"
EXCEPTION = "exception"
INTERRUPTED = "interrupted"

EXIT_INTERRUPTED = 130  # what a shell reports for a process ended by SIGINT (128 + 2)

# Progress lines on stdout, read by the orchestrator (hybrid.collect.orchestrate.PROGRESS_PREFIX). At most
# one per interval, so that a fast loop does not pay a write per step inside the measured window.
PROGRESS_PREFIX = "[hybrid] "
PROGRESS_INTERVAL_NS = 500_000_000

HOW_TO_MARK = (
    "no step was found (no optimizer.step(), no hybrid.mark_step(), no repeated top-level module call and "
    "no loop of the script whose iterations did work); mark the end of each step with `hybrid.mark_step()` "
    "or wrap each step in `with hybrid.step():`"
)


class StepLimitReached(SystemExit):
    """Stops the script after the last measured step. A SystemExit, so that the script's
    `except Exception:` does not swallow it while its finally-blocks and context managers still run."""

    def __init__(self) -> None:
        super().__init__(0)


@dataclass
class SessionConfig:
    pass_name: str  # plain | torch | nsys | ncu
    out_dir: Path
    warmup_steps: int = 1
    measured_steps: int = 5
    nvtx_modules: bool = False
    whole_run: bool = False  # the collector covers the whole script as one step
    stop_at_limit: bool = True  # raise StepLimitReached after the last measured step
    progress: bool = False  # print PROGRESS_PREFIX lines (the injector; not in-process use)
    detect: bool = (
        False  # find steps of unmarked scripts (hybrid.inject.step_finder); the injector turns it on
    )
    user_root: str | None = None  # directory whose files are the user's code (detect); default cwd
    # The script's own source calls hybrid.mark_step()/hybrid.step() (hybrid.inject.step_finder.
    # script_marks_steps): its marks count the steps and the detectors stay off, as a unit they find before
    # the first mark would take the window (launch_batch1_deep_mlp on the H200: one of the 64 forwards its
    # marked step makes, 1.32 ms instead of ~85 ms, decided 0.42 s in, before the loop's first mark).
    marked_by_script: bool = False
    settle: bool = False  # extend warmup until step times settle (the injector; a caller that counts
    # its own iterations, as profile_model does, needs exactly warmup_steps)
    python_stacks: bool = False  # torch pass: Python stacks of operators (with_stack), for callsites
    # Steps timed after warmup with no collector started yet, before the pass's own window: the plain
    # reference step time without a process of its own (hybrid.collect.orchestrate). Only where the script
    # uses
    # CUDA (a CPU-only run has no GPU timeline to weigh it against) unless plain_on_cpu.
    plain_steps: int = 0
    plain_on_cpu: bool = False

    def __post_init__(self) -> None:
        # Absolute now: a script that changes its working directory (os.chdir) must not move the outputs.
        self.out_dir = Path(self.out_dir).absolute()
        if self.pass_name not in PASSES:
            raise UsageError(f"unknown pass {self.pass_name!r}", f"use one of {', '.join(PASSES)}")
        if self.warmup_steps < 0 or self.measured_steps < 1 or self.plain_steps < 0:
            raise UsageError(
                f"bad step counts: warmup {self.warmup_steps}, measured {self.measured_steps}, "
                f"plain {self.plain_steps}",
                "use warmup >= 0, plain >= 0 and at least one measured step",
            )


_active: StepSession | None = None


def synchronize_device() -> bool:
    """Wait for the device if the script uses CUDA (whether it does); never initializes CUDA itself."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        return True
    return False


def active_session() -> StepSession | None:
    return _active


def mark_step() -> None:
    """Mark the end of one step. Does nothing outside a hybrid session."""
    session = _active
    if session is not None:
        session.mark(SOURCE_MARK)


@contextlib.contextmanager
def step() -> Iterator[None]:
    """`with hybrid.step():` around one step; a step whose body raises is not counted."""
    yield
    mark_step()


def set_batch_size(batch_size: int) -> None:
    """Declare the workload's batch size (reported with throughput). No-op outside a session."""
    session = _active
    if session is not None:
        session.batch_size = int(batch_size)


def name_modules(model: Any) -> None:
    """Tag every submodule of `model` with its qualified name (`layer1.0.conv1`), the name its NVTX
    module range carries; the root gets its class name."""
    for qualified_name, module in model.named_modules():
        # Write to __dict__ directly: nn.Module.__setattr__ would search params/buffers first.
        module.__dict__[MODULE_NAME_ATTR] = qualified_name or type(model).__name__


def outcome_of(exc: BaseException | None) -> tuple[str, int, str | None]:
    """(outcome, exit status, traceback text) for how the script ended."""
    if exc is None:
        return COMPLETED, 0, None
    if isinstance(exc, StepLimitReached):
        return STEP_LIMIT, 0, None
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED, EXIT_INTERRUPTED, None
    if isinstance(exc, SystemExit):
        code = exc.code
        # Python's own rule: None is 0, an int is itself, anything else is printed and exits 1.
        return COMPLETED, 0 if code is None else code if isinstance(code, int) else 1, None
    text = "".join(traceback_module.format_exception(type(exc), exc, exc.__traceback__))
    return EXCEPTION, 1, text


class StepSession:
    """One pass of one process. `begin()` before the workload, `finish()` after it (or use it as a
    context manager, which also swallows its own StepLimitReached)."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        self.batch_size: int | None = None
        self.warnings: list[str] = []
        self.steps_seen = 0  # warmup + measured steps counted so far
        self.step_source = SOURCE_NONE
        self.step_end_ns: list[int] = []  # host time since window start at each measured step end
        self.window_ns: int | None = None
        # The process's CPU time (all its threads) from the window's start to its last step end: how many
        # cores the step keeps busy, which bounds what work moved to other processes can overlap.
        self.window_cpu_ns: int | None = None
        self._window_cpu_start_ns = 0
        # Warmup steps after the first, timed without any collector: the same run's reference for
        # profiler overhead. An upper bound on the steady state, as late warmup may still be warming.
        self.unprofiled_steps = 0
        self.unprofiled_ns: int | None = None
        self._unprofiled_start_ns: int | None = None
        # The plain window (SessionConfig.plain_steps): host time since its start at each step's end.
        self.plain_end_ns: list[int] = []
        self.plain_started = False
        self._plain_start_ns = 0
        self._last_progress_ns = 0
        self.trace_path: Path | None = None
        self.cut_short_step: int | None = None  # index of the measured step the script's end cut short
        self._explicit_seen = False
        self.step_unit: str | None = None
        self.step_confidence: str | None = None
        self.step_reason: str | None = None
        self.warmup_dropped = 0  # steps counted before the window opened
        self.warmup_reason: str | None = None
        self._mark_ns: list[int] = []  # host time of each warmup step's end (settling)
        self._finder: Any = None
        self._patches: list[tuple[Any, str, Any]] = []  # (owner, attribute, original) to restore
        self._step_listeners: list[Callable[[], bool]] = []  # on_step_end
        self._optimizer_built = False
        self._state = "idle"  # idle -> warmup -> plain (optional) -> measuring -> done
        self._pid = os.getpid()
        self._window_start_ns = 0
        self._optimizer_hook: Any = None
        self._module_hooks: list[Any] = []
        self._profiler: Any = None
        self._user_profilers: UserProfilers | None = None  # the script's own profilers, kept inert
        self._torch_step_range: Any = None
        self._step_ranges = RangeStack(STEP_DOMAIN, enabled=config.pass_name in NVTX_PASSES)
        self._result: dict | None = None
        # True from the moment finish() starts writing the trace and inject.json: a launcher's SIGTERM
        # that lands then must not cut the report short (hybrid.inject.rank checks it).
        self.finishing = False
        self._gc = GcWatch()  # collections inside the measured window
        self._loader = LoaderWatch()  # DataLoader fetches inside it

    # -- lifecycle -------------------------------------------------------------------------------

    def begin(self) -> None:
        global _active
        if _active is not None:
            raise UsageError(
                "a hybrid step session is already active in this process",
                "finish the running session before starting another",
            )
        try:
            self.config.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"cannot create output directory {self.config.out_dir}: {exc}",
                "pass a writable --out directory",
            ) from exc
        # torch is imported before the workload so the optimizer hook exists before its first step;
        # importing torch does not initialize CUDA, so the script can still pick its devices.
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _active = self
        self._optimizer_hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        self._patch_step_sources()
        if self.config.whole_run:
            self._start_window()
        elif self.config.warmup_steps > 0 or self.config.detect:
            # With detection on, even --warmup 0 opens the window at the first step's end: start-up
            # (imports, model construction, CUDA init) is never part of a step.
            self._step_ranges.push("warmup")
            self._state = "warmup"
        else:
            # No warmup: step 0 starts here and so includes the script's setup.
            self._start_window()
        if self.config.detect and not self.config.whole_run and not self.config.marked_by_script:
            from hybrid.inject.step_finder import StepFinder

            self._finder = StepFinder(
                self.mark,
                self.config.user_root or os.getcwd(),
                lambda: self._optimizer_built and self.step_source != SOURCE_OPTIMIZER,
            )
            self._finder.start()
            # A forked DataLoader worker runs no step of its own: it must not pay for the tracer.
            os.register_at_fork(after_in_child=self._finder.stop)

    def _patch_step_sources(self) -> None:
        """The script's own torch.profiler steps count as explicit marks, and an optimizer's
        construction is noted, so that the detectors wait for its step hook instead of guessing."""
        import torch

        session = self
        optimizer_init = torch.optim.Optimizer.__init__
        self._user_profilers = UserProfilers(
            lambda: session.mark(SOURCE_PROFILER_STEP),
            self._profiler_marks_ended,
            self.config.user_root or os.getcwd(),
        )
        self._user_profilers.install()

        def init(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            session._optimizer_built = True
            optimizer_init(optimizer, *args, **kwargs)

        real_exit = os._exit

        def exit_now(status: int) -> None:
            # os._exit skips finally-blocks and atexit: report (and stop the collector) first, so the
            # run keeps what was measured and says how the script ended.
            if session._result is None and os.getpid() == session._pid:
                session.warnings.append(f"the script called os._exit({status}), which skips its cleanup")
            session.finish(COMPLETED, status)
            real_exit(status)

        self._patches = [
            (torch.optim.Optimizer, "__init__", optimizer_init),
            (os, "_exit", real_exit),
        ]
        torch.optim.Optimizer.__init__ = init
        os._exit = exit_now

    def _unpatch(self) -> None:
        for owner, attribute, original in self._patches:
            setattr(owner, attribute, original)
        self._patches = []
        if self._user_profilers is not None:
            self._user_profilers.uninstall()
        if self._finder is not None:
            self._finder.stop()

    def finish(self, outcome: str, exit_code: int, traceback: str | None = None) -> dict:
        """Close what is open, stop the collector, write inject.json; returns its content.
        Idempotent; does nothing in a forked child (DataLoader workers inherit the session)."""
        global _active
        if self._result is not None:
            return self._result
        if os.getpid() != self._pid:
            return {}
        self.finishing = True
        self._unpatch()
        if self._state == "measuring":
            if self.config.whole_run:
                self._synchronize()
                self.step_end_ns.append(time.perf_counter_ns() - self._window_start_ns)
                self.window_cpu_ns = time.process_time_ns() - self._window_cpu_start_ns
                self._close_step_range()
            else:
                # The step in progress is cut short by the script's end and is not timed. Its torch
                # range stays open (the trace marks it unfinished and the loader drops it); its NVTX
                # range is closed, as nsys's handling of an unclosed range is not defined, and
                # inject.json names it (cut_short_step) so that its loader can drop it.
                self.cut_short_step = len(self.step_end_ns)
                self._step_ranges.pop()
                self.warnings.append(
                    f"the script ended after {len(self.step_end_ns)} of {self.config.measured_steps} "
                    "measured steps; step time is the mean of those, without a final device synchronize"
                )
            self._stop_collection()
        elif self._state == "plain":
            self.warnings.append(
                f"the script ended after {len(self.plain_end_ns)} of {self.config.plain_steps} steps of the "
                "plain window (no collector), before the measured steps"
            )
        elif self._state == "warmup":
            self._step_ranges.pop()
            if self.steps_seen:
                unit = f" of {self.step_unit}" if self.step_unit else ""
                self.warnings.append(
                    f"the script ended during warmup after {self.steps_seen} steps{unit}; nothing was "
                    f"measured (it needs at least {self.config.warmup_steps} warmup + "
                    f"{self.config.measured_steps} measured steps): lower --warmup and --steps"
                )
        if self.steps_seen == 0:
            self.warnings.append(
                HOW_TO_MARK
                if self.config.whole_run
                else HOW_TO_MARK + ", or pass --whole-run to capture the whole script as one range"
            )
        if self._user_profilers is not None:
            self.warnings += self._user_profilers.notes()
        if self.step_end_ns:
            self.window_ns = self.step_end_ns[-1]
        if self._optimizer_hook is not None:
            self._optimizer_hook.remove()
        self._result = self._report(outcome, exit_code, traceback)
        _write_json_atomic(self.config.out_dir / INJECT_FILE, self._result)
        if _active is self:
            _active = None
        return self._result

    def __enter__(self) -> StepSession:  # noqa: PYI034 - py3.10 has no typing.Self
        self.begin()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self.finish(*outcome_of(exc))
        return isinstance(exc, StepLimitReached)

    # -- step marks ------------------------------------------------------------------------------

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.mark(SOURCE_OPTIMIZER)

    def mark(self, source: str) -> None:
        """Count the end of one step (explicit mark > optimizer hook > detected unit)."""
        if self._state in ("idle", "done") or os.getpid() != self._pid:
            return
        current = self.step_source
        if source in DETECTED_SOURCES and current not in (SOURCE_NONE, source):
            return  # a stronger source counts the steps
        if source == SOURCE_OPTIMIZER and self._explicit_seen:
            return
        if source in EXPLICIT_SOURCES and not self._explicit_seen:
            self._explicit_seen = True
            if current == SOURCE_OPTIMIZER:
                # A script that both steps an optimizer and marks steps: the hook already counted
                # this iteration a moment ago, so this first explicit mark is the same step.
                self._set_source(source)
                return
        if current in DETECTED_SOURCES and source not in DETECTED_SOURCES:
            if self._state == "measuring":
                if not any("came after" in w for w in self.warnings):
                    self.warnings.append(
                        f"{source} came after the window opened on {self.step_unit}; "
                        "the measured steps stay in that unit"
                    )
                return
            # The stronger source takes over: warmup starts again in its unit.
            self.steps_seen, self._mark_ns = 0, []
        if source not in DETECTED_SOURCES and self._finder is not None and self._finder.running:
            self._finder.stop()  # marks or the optimizer count the steps: the detectors' cost ends here
        if source != current:
            self._set_source(source)
        self.steps_seen += 1
        if self._step_listeners:
            self._step_listeners = [listener for listener in self._step_listeners if not listener()]
        if self.config.whole_run:
            return
        if self._state == "warmup":
            self._mark_ns.append(time.perf_counter_ns())
            self._progress(f"warmup {self.steps_seen}/{self.config.warmup_steps}")
            if self._warmup_done():
                self.warmup_dropped = self.steps_seen
                self._step_ranges.pop()
                self._end_warmup()
            elif self.steps_seen == 1:
                # The first step carries setup and first-call costs: the unprofiled reference starts after it.
                self._synchronize()
                self._unprofiled_start_ns = time.perf_counter_ns()
            return
        if self._state == "plain":
            self._plain_step()
            return
        last = len(self.step_end_ns) + 1 == self.config.measured_steps
        if last:
            self._synchronize()  # so the window covers the device work of the last step
        self.step_end_ns.append(time.perf_counter_ns() - self._window_start_ns)
        self.window_cpu_ns = time.process_time_ns() - self._window_cpu_start_ns
        self._close_step_range()
        self._progress(f"step {len(self.step_end_ns)}/{self.config.measured_steps}", force=last)
        if not last:
            self._open_step_range(len(self.step_end_ns))
            return
        self._stop_collection()
        if self.config.stop_at_limit:
            # Report before stopping the script: what it runs on its way out (finally-blocks, atexit)
            # can no longer lose the measurement.
            self.finish(STEP_LIMIT, 0)
            raise StepLimitReached()

    def on_step_end(self, listener: Callable[[], bool]) -> None:
        """Call `listener()` at the end of every step from now on, until it returns True
        (hybrid.inject.apply_fix acts between two steps of the script)."""
        self._step_listeners.append(listener)

    def _profiler_marks_ended(self) -> None:
        """The script stopped its own (inert) profiler: its step() calls no longer mark steps, so the
        optimizer hook may count them again."""
        if self.step_source == SOURCE_PROFILER_STEP:
            self._explicit_seen = False

    def _set_source(self, source: str) -> None:
        self.step_source = source
        finder = self._finder
        if source in DETECTED_SOURCES and finder is not None:
            self.step_unit, self.step_confidence, self.step_reason = (
                finder.unit,
                finder.confidence,
                finder.reason,
            )
            return
        self.step_confidence = CONFIDENCE_HIGH
        self.step_unit, self.step_reason = {
            SOURCE_OPTIMIZER: ("one optimizer.step()", "the optimizer step hook fired"),
            SOURCE_MARK: ("one hybrid.mark_step() interval", "the script marks its steps"),
            SOURCE_PROFILER_STEP: ("one torch.profiler step()", "the script calls its profiler's step()"),
        }.get(source, (None, None))

    def _unit_with_calls(self) -> str | None:
        """The unit, with how many there are per call of the library function that made them."""
        per_call = (
            self._finder.facts().get("per_call")
            if self._finder is not None and self.step_source == "module_call"
            else None
        )
        if not per_call or not self.step_unit:
            return self.step_unit
        if not per_call["complete"]:
            return (
                f"{self.step_unit}, at least {per_call['forwards']} per {per_call['function']}() call "
                "(the script was stopped inside the first)"
            )
        return f"{self.step_unit}, {per_call['forwards']} per {per_call['function']}() call"

    def _warmup_done(self) -> bool:
        """Warmup ends after the requested count once step times have settled (at most
        settle.MAX_EXTRA_WARMUP steps later); the reason is kept for the report."""
        requested = self.config.warmup_steps
        seen = self.steps_seen
        if seen < requested:
            return False
        durations = [(b - a) / 1e6 for a, b in zip(self._mark_ns, self._mark_ns[1:], strict=False)]
        if requested == 0 or not self.config.settle:
            self.warmup_reason = f"{seen} warmup step(s) dropped: {requested} requested (--warmup)"
            return True
        if settle.is_settled(durations):
            extra = seen - requested
            self.warmup_reason = f"{seen} warmup steps dropped: {requested} requested (--warmup)" + (
                f" + {extra} until step times settled within "
                f"{settle.SETTLE_TOLERANCE:.0%} (last: {settle.describe(durations)})"
                if extra
                else f", step times settled (last: {settle.describe(durations)})"
            )
            return True
        if seen >= requested + settle.MAX_EXTRA_WARMUP:
            self.warmup_reason = (
                f"{seen} warmup steps dropped: step times had not settled within "
                f"{settle.SETTLE_TOLERANCE:.0%} (last: {settle.describe(durations)}); measuring anyway"
            )
            self.warnings.append(
                f"step times had not settled after {seen} warmup steps "
                f"(last: {settle.describe(durations)}): the measured steps may still be warming up "
                "or may differ by design"
            )
            return True
        return False

    # -- measured window -------------------------------------------------------------------------

    def _end_warmup(self) -> None:
        """Warmup is over: the plain window first where one is asked for, else the pass's own window."""
        cuda_used = self._synchronize()
        if self._unprofiled_start_ns is not None:
            self.unprofiled_ns = time.perf_counter_ns() - self._unprofiled_start_ns
            self.unprofiled_steps = self.steps_seen - 1
        if self.config.plain_steps and (cuda_used or self.config.plain_on_cpu):
            # Before the collector starts, not after it stops: torch.profiler's CUPTI subscription can
            # outlive profiler.stop() (without cuptiFinalize, training ran 10-20% slower after profiling:
            # pytorch/pytorch#146604), while before start() no collector is loaded at all.
            self.plain_started = True
            self._state = "plain"
            self._plain_start_ns = time.perf_counter_ns()
            return
        self._start_window()

    def _plain_step(self) -> None:
        last = len(self.plain_end_ns) + 1 == self.config.plain_steps
        if last:
            self._synchronize()  # the window covers its last step's device work, as the measured one does
        self.plain_end_ns.append(time.perf_counter_ns() - self._plain_start_ns)
        self._progress(
            f"plain window step {len(self.plain_end_ns)}/{self.config.plain_steps} (no collector)", force=last
        )
        if last:
            self._start_window()

    def _start_window(self) -> None:
        import torch

        # Synchronize at the window's edges only: a per-step sync would change what is measured.
        cuda_used = self._synchronize()
        if cuda_used:
            torch.cuda.reset_peak_memory_stats()
        self._start_collection()
        self._state = "measuring"
        self._gc.start()
        self._loader.start()
        self._window_start_ns = time.perf_counter_ns()
        self._window_cpu_start_ns = time.process_time_ns()
        self._open_step_range(0)

    def _start_collection(self) -> None:
        import torch

        pass_name = self.config.pass_name
        if pass_name == "torch":
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profiler = UserProfilers.adopt(
                torch.profiler.profile(
                    activities=activities,
                    record_shapes=True,
                    with_flops=True,
                    profile_memory=False,
                    with_stack=self.config.python_stacks,
                )
            )
            self._profiler.start()
        elif pass_name in NVTX_PASSES:
            # nsys captures with --capture-range=cudaProfilerApi; ncu may use --profile-from-start off.
            # A whole-run capture needs no start call.
            if torch.cuda.is_available() and not self.config.whole_run:
                torch.cuda.profiler.start()
            if self.config.nvtx_modules:
                self._install_module_ranges()

    def _stop_collection(self) -> None:
        import torch

        self._state = "done"
        self._gc.stop()
        self._loader.stop()
        for handle in self._module_hooks:
            handle.remove()
        self._module_hooks = []
        if self._profiler is not None:
            self._profiler.stop()
            trace_path = self.config.out_dir / TRACE_FILE
            try:
                self._profiler.export_chrome_trace(str(trace_path))
                self.trace_path = trace_path
                _write_json_atomic(self.config.out_dir / OP_FLOPS_FILE, _op_flops(self._profiler))
            except (OSError, RuntimeError) as exc:
                self.warnings.append(f"could not write the torch trace {trace_path}: {exc}")
            self._profiler = None
        elif self.config.pass_name in NVTX_PASSES and torch.cuda.is_available() and not self.config.whole_run:
            torch.cuda.profiler.stop()

    def _open_step_range(self, index: int) -> None:
        self._step_ranges.push(f"step {index}")
        if self._profiler is not None:
            from torch.autograd.profiler import record_function

            self._torch_step_range = record_function(f"{TORCH_STEP_PREFIX}{index}")
            self._torch_step_range.__enter__()

    def _close_step_range(self) -> None:
        self._step_ranges.pop()
        if self._torch_step_range is not None:
            self._torch_step_range.__exit__(None, None, None)
            self._torch_step_range = None

    def _install_module_ranges(self) -> None:
        # Forward only: a global backward hook wraps every module's inputs/outputs in
        # BackwardHookFunction, which breaks in-place ops on them (ResNet's ReLU(inplace=True)).
        import torch.nn.modules.module as nn_module

        ranges = RangeStack(MODULE_DOMAIN)

        def push(module: Any, args: Any) -> None:
            if ranges.depth == 0 and MODULE_NAME_ATTR not in module.__dict__:
                name_modules(module)  # the outermost call is the model: its tree gives qualified names
            ranges.push(module.__dict__.get(MODULE_NAME_ATTR) or type(module).__name__)

        def pop(module: Any, args: Any, output: Any) -> None:
            ranges.pop()

        self._module_hooks = [
            nn_module.register_module_forward_pre_hook(push),
            # always_call: pop even when forward raises, so ranges stay balanced.
            nn_module.register_module_forward_hook(pop, always_call=True),
        ]

    def _progress(self, text: str, force: bool = False) -> None:
        now = time.perf_counter_ns()
        if self.config.progress and (force or now - self._last_progress_ns >= PROGRESS_INTERVAL_NS):
            self._last_progress_ns = now
            try:
                print(f"{PROGRESS_PREFIX}{self.config.pass_name} {text}", flush=True)
            except OSError:
                # Nobody reads the pipe any more (hybrid was killed): progress is not worth the script.
                self.config.progress = False

    def _synchronize(self) -> bool:
        return synchronize_device()

    # -- report ----------------------------------------------------------------------------------

    def _report(self, outcome: str, exit_code: int, traceback: str | None) -> dict:
        import torch

        config = self.config
        measured = len(self.step_end_ns)
        cuda_used = torch.cuda.is_available() and torch.cuda.is_initialized()
        device_name = peak_memory = capacity = None
        if cuda_used:
            device = torch.cuda.current_device()
            device_name = torch.cuda.get_device_name(device)
            peak_memory = int(torch.cuda.max_memory_allocated(device))
            capacity = int(torch.cuda.get_device_properties(device).total_memory)
        return {
            "pass": config.pass_name,
            "outcome": outcome,
            "exit_code": exit_code,
            "traceback": traceback,
            "warmup_steps": config.warmup_steps,
            "measured_steps": measured,
            "requested_steps": config.measured_steps,
            "steps_seen": self.steps_seen,
            "step_source": self.step_source,
            "step_unit": self._unit_with_calls(),
            "step_confidence": self.step_confidence,
            "step_reason": self.step_reason,
            "step_detection": (
                self._finder.facts()
                if self._finder is not None
                else {"off": "the script calls hybrid.mark_step() or hybrid.step()"}
                if self.config.marked_by_script
                else None
            ),
            "warmup_dropped": self.warmup_dropped,
            "warmup_reason": self.warmup_reason,
            "whole_run": config.whole_run,
            "window_ns": self.window_ns,
            "window_cpu_ns": self.window_cpu_ns,
            "step_time_ms": self.window_ns / measured / 1e6 if measured and self.window_ns else None,
            "step_end_ns": self.step_end_ns,
            "cut_short_step": self.cut_short_step,
            "unprofiled_steps": self.unprofiled_steps,
            "unprofiled_step_time_ms": (
                self.unprofiled_ns / self.unprofiled_steps / 1e6
                if self.unprofiled_steps and self.unprofiled_ns
                else None
            ),
            "plain_window": self._plain_window(),
            "compile_cache": _compile_cache_counts(),
            "cuda_available": torch.cuda.is_available(),
            "device_name": device_name,
            "peak_memory_bytes": peak_memory,  # since the window started (reset there)
            "gc": self._gc.facts(),
            "data_loader": self._loader.facts(),
            "host_cpus": host_cpus.usable_cpus(),
            "memory_capacity_bytes": capacity,
            "torch_version": torch.__version__,
            "graph_breaks": _graph_breaks(),
            "batch_size": self.batch_size,
            "config": run_config.capture(),
            "trace": self.trace_path.name if self.trace_path else None,
            # The script's own profilers, kept inert (hybrid.inject.user_profiler).
            "user_profilers": [p.to_dict() for p in self._user_profilers.found]
            if self._user_profilers
            else [],
            "nvtx_domains": self._step_ranges.uses_domain if config.pass_name in NVTX_PASSES else None,
            "warnings": self.warnings,
        }

    def _plain_window(self) -> dict | None:
        """The plain window's record (inject.json plain_window): None where none was started; a window
        the script's end cut short keeps its complete steps but no step time (no device sync closed it)."""
        if not self.plain_started:
            return None
        steps = len(self.plain_end_ns)
        complete = steps == self.config.plain_steps
        return {
            "requested_steps": self.config.plain_steps,
            "measured_steps": steps,
            "complete": complete,
            "step_end_ns": self.plain_end_ns,
            "window_ns": self.plain_end_ns[-1] if complete else None,
            "step_time_ms": self.plain_end_ns[-1] / steps / 1e6 if complete else None,
        }


# torch._dynamo's counters of the compile caches that let a later pass of the same run skip compiling
# (hybrid.collect.orchestrate points every pass at one run-private cache).
COMPILE_CACHE_COUNTERS = {
    "inductor": run_config.FX_GRAPH_CACHE_COUNTERS,
    "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass"),
}


def _compile_cache_counts() -> dict[str, float] | None:
    """Hits and misses of the FX graph and AOTAutograd caches in this process; None when dynamo never ran."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is None:
        return None
    counts: dict[str, float] = {
        name: int(dynamo_utils.counters.get(group, {}).get(name, 0))
        for group, names in COMPILE_CACHE_COUNTERS.items()
        for name in names
    }
    if not any(counts.values()):
        return None
    # Seconds dynamo spent compiling frames, cache loads included (its own timer).
    counts["compile_s"] = round(
        sum(dynamo_utils.compilation_time_metrics.get("_compile.compile_inner", [])), 3
    )
    return counts


def _graph_breaks() -> list[dict]:
    """torch.compile graph breaks by reason; empty when dynamo never ran (not imported here, as
    importing it is slow and would change nothing)."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is None:
        return []
    breaks = dynamo_utils.counters.get("graph_break", {})
    # Where each break happened: the innermost user frame dynamo kept with the reason (GraphCompileReason).
    sites = {
        str(r.reason): r.user_stack[-1]
        for r in getattr(dynamo_utils, "graph_break_reasons", [])
        if getattr(r, "user_stack", None)
    }
    return [
        {
            "reason": str(reason),
            "count": int(count),
            **(
                {"file": sites[reason].filename, "line": sites[reason].lineno, "function": sites[reason].name}
                if reason in sites
                else {}
            ),
        }
        for reason, count in sorted(breaks.items(), key=lambda item: -item[1])
    ]


def _op_flops(profiler: Any) -> dict:
    """{External id: FLOPs} of the operators torch estimated FLOPs for. Reads the profiler's raw
    events (FunctionEvent.id is their correlation id, which the trace writes as `External id`)
    rather than `profiler.events()`, which would rebuild the whole event tree."""
    events = profiler.profiler.kineto_results.events()
    return {str(event.correlation_id()): int(event.flops()) for event in events if event.flops()}


def _write_json_atomic(path: Path, content: dict) -> None:
    # Write-then-rename: a reader never sees half a file, even if the process is killed meanwhile.
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(content, indent=2, default=str))
    os.replace(partial, path)
