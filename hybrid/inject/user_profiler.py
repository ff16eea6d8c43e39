"""The script's own torch profilers, kept inert while a hybrid session runs.

A script that profiles itself (`torch.profiler.profile`, with or without a schedule, as a `with` block or
through start()/stop(); or the legacy `torch.autograd.profiler.profile`) would otherwise run a second
collector beside hybrid's, and every pass would pay for it:
  - its `prof.step()` writes `ProfilerStep#N` ranges into hybrid's torch trace, a second step series the
    loader counts with hybrid's own (issue 27: 39 steps of 536 us instead of 20 of ~1 ms);
  - Kineto keeps one session per process: a second profiler's stop() ends the first's (torch 2.14 then
    warns "disableProfiler called but no active profiling session found"), and under the nsys and ncu
    passes its CUPTI subscription competes with the Nsight tool's own;
  - without a schedule it records every operator of every pass (issue 27: ~0.8 ms steps took 160 ms).
So the first time a profiler that is not hybrid's own starts (start(), `with`, or step()), it is made
inert: its schedule answers NONE for every step, so none of its transitions ever starts Kineto; it writes
no ProfilerStep ranges and never calls its on_trace_ready handler; its export calls write nothing (the
user's trace files are never written over); its event queries answer empty. Its step() calls still
count, as the script's step marks. Hybrid's torch pass takes its place: the same CPU and CUDA activity,
shapes and FLOPs over the measured steps, with the ProfilerStep#N ranges TensorBoard and HTA read.
The instance stays inert after the session ends, so the `with` block's exit after hybrid stopped the
script at its step limit finds nothing to stop.

torch is imported lazily, by install(), which the session calls after importing torch itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

OWN_ATTR = "_hybrid_own_profiler"  # set on hybrid's own torch.profiler.profile: left alone
INERT_ATTR = "_hybrid_inert_profiler"  # the UserProfiler record of a profiler made inert

KIND_PROFILE = "torch.profiler.profile"
KIND_LEGACY = "torch.autograd.profiler.profile"

_OWN_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


@dataclass
class UserProfiler:
    """One of the script's profilers that hybrid kept inert (inject.json user_profilers)."""

    kind: str
    site: str  # file:line of the script's call that started it
    schedule: bool  # torch.profiler.profile given a schedule
    trace_handler: bool  # it has an on_trace_ready handler (which never ran)
    steps: int = 0  # its step() calls seen
    exports_skipped: list[str] = field(default_factory=list)  # files its export calls would have written

    def note(self) -> str:
        """What was done with it, for the report."""
        scheduled = " (with a schedule)" if self.schedule else ""
        unwritten = []
        if self.trace_handler:
            unwritten.append("its on_trace_ready handler never ran")
        if self.exports_skipped:
            unwritten.append(
                "its export to "
                + ", ".join(self.exports_skipped)
                + " wrote nothing (the file was left as it was)"
            )
        written = "; ".join(unwritten) or "it wrote no trace"
        marks = f"; its {self.steps} step() call(s) counted as step marks" if self.steps else ""
        return (
            f"your {self.kind} at {self.site}{scheduled} was kept inert during hybrid's passes: it "
            f"collected nothing and {written}{marks}; hybrid's torch pass trace (torch/trace.json) "
            "covers the measured steps in its place"
        )

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "site": self.site,
            "schedule": self.schedule,
            "trace_handler": self.trace_handler,
            "steps": self.steps,
            "exports_skipped": self.exports_skipped,
        }


class UserProfilers:
    """Patches torch's profiler classes for one session. `on_step` is called at each step() of an inert
    profiler (a step mark), `on_stop` when one stops (its step marks end there: a script that profiles its
    first steps and trains on has only its optimizer to count the rest); `user_root` is the folder call
    sites are shown relative to."""

    def __init__(self, on_step: Callable[[], None], on_stop: Callable[[], None], user_root: str) -> None:
        self._on_step = on_step
        self._on_stop = on_stop
        self._user_root = os.path.realpath(user_root)
        self._torch_root = ""
        self.found: list[UserProfiler] = []
        self._patches: list[tuple[Any, str, Any]] = []

    @staticmethod
    def adopt(profiler: Any) -> Any:
        """Mark hybrid's own profiler, which must run."""
        profiler.__dict__[OWN_ATTR] = True
        return profiler

    def install(self) -> None:
        import torch
        import torch.autograd.profiler as legacy

        self._torch_root = os.path.dirname(os.path.realpath(torch.__file__))
        guard = self
        profile = torch.profiler.profile
        start, step = profile.start, profile.step
        legacy_enter = legacy.profile.__enter__

        def guarded_start(profiler: Any) -> None:
            if guard._keep_inert(profiler, KIND_PROFILE) is None:
                start(profiler)

        def guarded_step(profiler: Any) -> None:
            record = guard._keep_inert(profiler, KIND_PROFILE)
            if record is None:
                step(profiler)
                if profiler.__dict__.get(OWN_ATTR):
                    return
            else:
                profiler.step_num += 1
                record.steps += 1
            guard._on_step()

        def guarded_enter(profiler: Any) -> Any:
            if not profiler.enabled:  # profile(enabled=False) does nothing anyway
                return legacy_enter(profiler)
            guard._keep_inert(profiler, KIND_LEGACY)
            return profiler

        self._patches = [
            (profile, "start", start),
            (profile, "step", step),
            (legacy.profile, "__enter__", legacy_enter),
        ]
        guarded = {"start": guarded_start, "step": guarded_step, "__enter__": guarded_enter}
        for owner, attribute, _original in self._patches:
            setattr(owner, attribute, guarded[attribute])

    def uninstall(self) -> None:
        """Restore torch's classes; the profilers made inert stay inert."""
        for owner, attribute, original in self._patches:
            setattr(owner, attribute, original)
        self._patches = []

    def notes(self) -> list[str]:
        return [record.note() for record in self.found]

    def _keep_inert(self, profiler: Any, kind: str) -> UserProfiler | None:
        """The inert record of a profiler that is not hybrid's own (made inert on its first call); None
        for hybrid's own, and for one already collecting when the session began (in-process use inside
        the caller's own profiler: stopping its schedule then would leave its Kineto session running)."""
        if profiler.__dict__.get(OWN_ATTR) or getattr(profiler, "profiler", None) is not None:
            return None
        record = profiler.__dict__.get(INERT_ATTR)
        if record is not None:
            return record
        record = UserProfiler(
            kind=kind,
            site=self._site(sys._getframe(1)),
            schedule=kind == KIND_PROFILE and bool(getattr(profiler, "record_steps", False)),
            trace_handler=getattr(profiler, "on_trace_ready", None) is not None,
        )
        profiler.__dict__[INERT_ATTR] = record
        self.found.append(record)
        if kind == KIND_PROFILE:
            _silence_profile(profiler, record)
            profiler.stop = self._on_stop
        else:
            _silence_legacy(profiler, record)
        return record

    def _site(self, frame: FrameType | None) -> str:
        """file:line of the first caller outside torch, hybrid and the standard library's contextlib."""
        while frame is not None:
            path = os.path.realpath(frame.f_code.co_filename)
            inside = (self._torch_root, _OWN_ROOT)
            if not any(path.startswith(root + os.sep) for root in inside) and not path.endswith(
                f"{os.sep}contextlib.py"
            ):
                shown = (
                    os.path.relpath(path, self._user_root)
                    if path.startswith(self._user_root + os.sep)
                    else path
                )
                return f"{shown}:{frame.f_lineno}"
            frame = frame.f_back
        return "an unknown place"


def _skipped_export(record: UserProfiler) -> Callable[..., None]:
    def export(path: Any = None, *args: Any, **kwargs: Any) -> None:
        if path is not None:
            record.exports_skipped.append(str(path))

    return export


def _silence_profile(profiler: Any, record: UserProfiler) -> None:
    """A torch.profiler.profile whose schedule never records: start(), step() and stop() then make
    no transition that starts Kineto or calls on_trace_ready."""
    from torch.profiler import ProfilerAction

    profiler.schedule = _never
    profiler.record_steps = False  # no ProfilerStep#N ranges of its own in hybrid's trace
    profiler.current_action = ProfilerAction.NONE
    if hasattr(profiler, "_prev_schedule_action"):
        profiler._prev_schedule_action = ProfilerAction.NONE
    profiler.on_trace_ready = None
    for name in ("export_chrome_trace", "export_stacks", "export_memory_timeline"):
        setattr(profiler, name, _skipped_export(record))
    profiler.events = _no_events
    profiler.key_averages = lambda *args, **kwargs: _no_events().key_averages(*args, **kwargs)


def _silence_legacy(profiler: Any, record: UserProfiler) -> None:
    """A torch.autograd.profiler.profile that never entered: disabled, so its __exit__ returns at once,
    with an empty event list for its queries."""
    profiler.enabled = False
    profiler.entered = True
    profiler._function_events = _no_events()
    profiler._needs_processing = False
    for name in ("export_chrome_trace", "export_stacks"):
        setattr(profiler, name, _skipped_export(record))


def _no_events() -> Any:
    """An empty EventList its queries (key_averages, table, total_average) accept."""
    from torch.autograd.profiler_util import EventList

    events = EventList()
    events._build_tree()
    return events


def _never(_step: int) -> Any:
    from torch.profiler import ProfilerAction

    return ProfilerAction.NONE
