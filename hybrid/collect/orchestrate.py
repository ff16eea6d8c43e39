"""Plans and runs the collection passes of one `hybrid run`, each in its own child process and each
under exactly one collector (CUPTI takes one subscriber: torch.profiler under nsys or ncu would fail
or silently lose data). Knows nothing about analysis: it leaves a run directory behind.

Order: plain (only with --baseline) -> torch -> nsys -> ncu. The torch pass tells whether the script
steps at all, and times the plain reference steps in its own process before torch.profiler starts (the
plain window: no process of its own to start, build and warm up); the nsys pass tells which kernels are
worth ncu's replay cost, and whether counters could change the ranking at all (hybrid.collect.ncu_plan).
Every pass reads and writes one run-private compile cache, so a torch.compile'd script compiles from
scratch once per run. The script is never run
again behind the user's back (it may have side effects): when the torch pass finds no step, the nsys
pass captures the whole run and the export's step chain (periodicity, steady window) finds the steps;
with no nsys, the run stops and says how to mark steps or ask for --whole-run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hybrid import __version__
from hybrid.collect.signals import killed_fix, killed_message, killing_signal
from hybrid.errors import OutputError, ProfilerError, Terminated, UsageError, WorkloadError
from hybrid.files import output_error
from hybrid.inject.script import HYBRID_PID_ENV, SAFE_PATH_ENV
from hybrid.load import settle
from hybrid.rundir import RunDir
from hybrid.schema import NCU_PLANNED_WARNING, NCU_SKIPPED_WARNING
from nsight.ncu import DEFAULT_BUDGET_S as NCU_DEFAULT_BUDGET_S
from nsight.nsys import CALLSITE_LEVELS

if TYPE_CHECKING:
    from hybrid.collect.ncu_plan import NcuPlan
    from hybrid.collect.preload import TracePreload
    from hybrid.profile import Profile

MODES = ("auto", "hybrid", "nsys", "torch")
# The plain reference (no collector) tells how much a collector slowed the step (simple_cnn on the H200: nsys
# +120%). Without --baseline it is a window of the torch pass's process: SHORT_PLAIN_STEPS steps after warmup,
# before torch.profiler starts. Where that window could not run (the script was too short for it and the
# torch pass ran again without it), a plain pass of its own runs when the torch pass took at most
# CHEAP_PLAIN_PASS_S. On CPU-only runs the window runs too (--plain-on-cpu): the torch pass is their only
# timeline, and its slowdown is reported as on a GPU (a num_workers=0 loader's Python items: +39%).
CHEAP_PLAIN_PASS_S = 60.0
# Steps the plain window (or the short plain pass) measures: enough for a mean step time, its only output.
SHORT_PLAIN_STEPS = 10
# The run-private compile caches every pass shares (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR), removed when
# the passes end. A variable the user set is left as set.
COMPILE_CACHE_DIR = "compile-cache"
COMPILE_CACHE_ENV = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
# What each pass gives the diagnosis (run.json and results.json passes[].contributed: the report's cost line).
PASS_CONTRIBUTIONS = {
    "plain": "the reference step time, without a collector",
    "torch": "operators with their shapes and FLOPs, and where the steps are",
    "nsys": "the measured timeline: kernels, copies, syncs and host calls of the measured steps",
    "ncu": "hardware counters of the selected kernels",
}
PROGRESS_PREFIX = "[hybrid] "  # lines the injector prints so the parent can show steps done
# How long a pass may take to close its trace after a stop signal before its group is killed.
STOP_GRACE_S = 20.0
# How long a pass's process may outlive its workload's record (inject.json, written in every ending) before
# it is stopped as stuck: a collector finishing its capture (nsys writing .nsys-rep took a few seconds of a
# 22 s pass on the H200; its SQLite export is a separate call with its own timeout) never needs minutes, and
# a hung one would hold the run forever.
AFTER_WORKLOAD_EXIT_S = 600.0
# What a process prints when a write fails for want of space (errno 28, EDQUOT, errno 27 under ulimit -f).
NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded", "File too large")


@dataclass
class Target:
    """What to profile: a script path (or, with is_module, a module run as __main__) and its args."""

    argv: list[str]
    is_module: bool = False

    @property
    def display(self) -> str:
        return shlex.join((["-m"] if self.is_module else []) + self.argv)


@dataclass
class RunOptions:
    out_dir: Path
    mode: str = "auto"
    warmup: int = 5
    steps: int = 20
    nvtx_modules: bool = False
    # A plain pass without any collector over all --steps, the exact reference for profiler overhead. Without
    # it, a short plain pass runs after the torch pass when that was cheap (CHEAP_PLAIN_PASS_S).
    baseline: bool = False
    ncu_kernels: int = 12  # cap on kernel names replayed by ncu
    ncu_coverage: float = 0.9
    # Seconds of replay `--mode auto` gives the ncu pass (hybrid.collect.ncu_plan); 0: no budget.
    ncu_budget_s: float = NCU_DEFAULT_BUDGET_S
    # What the nsys pass records to point findings at the script's lines (nsight.nsys.CALLSITE_LEVELS).
    callsites: str = "python"
    torch_stacks: bool = False  # the torch pass records operators' Python stacks (with_stack)
    whole_run: bool = False  # every pass captures the whole script as one range (asked for explicitly)
    extra_env: dict[str, str] = field(default_factory=dict)
    # After the passes, time the run's GEMM/conv shapes on its GPU (hybrid.collect.calibration_pass); the
    # CLI turns it on unless --no-calibrate.
    calibrate: bool = False
    # out_dir is a default name (not --out): a taken one gets a -2, -3, ... suffix instead of an error.
    unique_out_dir: bool = False
    # After the diagnosis, re-run the plain window with the fix of each of the top `verify` findings whose fix
    # hybrid can switch on (hybrid.collect.verify); 0: none.
    verify: int = 0

    def validate(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"unknown mode {self.mode!r}", f"use one of: {', '.join(MODES)}")
        if self.callsites not in CALLSITE_LEVELS:
            raise UsageError(
                f"unknown --callsites level {self.callsites!r}", f"use one of: {', '.join(CALLSITE_LEVELS)}"
            )
        if self.steps <= 0:
            raise UsageError(f"--steps must be at least 1 (got {self.steps})", "pass --steps 20, for example")
        if self.warmup < 0:
            raise UsageError(
                f"--warmup cannot be negative (got {self.warmup})", "pass --warmup 5, for example"
            )
        if self.verify < 0:
            raise UsageError(
                f"--verify cannot be negative (got {self.verify})", "pass --verify 3, for example"
            )
        if self.ncu_budget_s < 0:
            raise UsageError(
                f"--ncu-budget-s cannot be negative (got {self.ncu_budget_s:g})",
                "pass --ncu-budget-s 5, for example, or 0 for no budget",
            )
        if self.ncu_kernels < 1:
            raise UsageError(
                f"--ncu-kernels must be at least 1 (got {self.ncu_kernels})",
                "pass --ncu-kernels 12, for example, or --mode nsys to skip ncu",
            )


@dataclass
class PassResult:
    name: str
    status: str  # ok | failed | skipped | interrupted (Ctrl-C) | terminated (SIGTERM, SIGHUP)
    wall_s: float = 0.0
    # The pass whose process ran this window, where it is not its own (the plain window runs in the torch
    # pass's process, and its wall_s is the window's own time).
    process: str | None = None
    contributed: str = ""  # what the pass gave the diagnosis, or why it was skipped (the report's cost line)
    returncode: int | None = None
    message: str = ""
    command: list[str] = field(default_factory=list)
    inject: dict | None = None  # the injector's inject.json

    @property
    def step_time_ms(self) -> float | None:
        return (self.inject or {}).get("step_time_ms")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["step_time_ms"] = self.step_time_ms
        # Hits and misses of the shared compile caches, where the script compiled (inject.json compile_cache).
        out["compile_cache"] = (self.inject or {}).get("compile_cache")
        # The script's own torch.profiler instances the injector kept inert in this pass, with their lines.
        out["user_profilers"] = (self.inject or {}).get("user_profilers")
        out.pop("inject")
        return out


# progress(pass_name, event, detail): event is "start", "step", "line", "end", or "total" (how many
# units of work the next pass has, as text: the launches ncu will replay)
Progress = Callable[[str, str, str], None]


def _quiet(_name: str, _event: str, _detail: str) -> None:
    return None


class _Pump:
    """Copies a pass's output to its console.log and the progress view. The pipe is drained whatever
    happens to the log: a full disk must never block the workload on a full pipe; the failed write is
    kept for the orchestrator to report."""

    def __init__(self, progress: Progress, name: str) -> None:
        self.progress = progress
        self.name = name
        self.log_error: OSError | None = None
        self.no_space_line: str | None = None  # a line of the pass's own output saying it ran out of space

    def run(self, child: subprocess.Popen, log) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            if self.log_error is None:
                try:
                    log.write(line)
                except OSError as error:
                    self.log_error = error
            if self.no_space_line is None and any(text in line for text in NO_SPACE_TEXT):
                self.no_space_line = line
            if line.startswith(PROGRESS_PREFIX):
                self.progress(self.name, "step", line[len(PROGRESS_PREFIX) :].strip())
            else:
                self.progress(self.name, "line", line.rstrip("\n"))
        try:
            log.flush()
        except OSError as error:
            self.log_error = self.log_error or error


@contextlib.contextmanager
def _closing_quietly(log, pump: _Pump):
    """Close the console log; a failed final flush (a full disk) is the pump's to report, not a crash."""
    try:
        yield log
    finally:
        try:
            log.close()
        except OSError as error:
            pump.log_error = pump.log_error or error


class Orchestrator:
    # Steps of the plain window in the torch pass's process (0: a plain pass of its own instead).
    plain_window_steps = SHORT_PLAIN_STEPS

    def __init__(self, target: Target, options: RunOptions, progress: Progress = _quiet) -> None:
        options.validate()
        self.target = target
        self.options = options
        self.progress = progress
        self._check_target()  # before the run directory exists: a typo leaves nothing behind
        self.run_dir = RunDir.create(options.out_dir, unique=options.unique_out_dir)
        self.passes: list[PassResult] = []
        self.mode_reasons: list[str] = []
        # Set when the script ended while warmup waited for step times to settle: every pass then
        # drops exactly this many steps and measures the script's last ones.
        self.fixed_warmup: int | None = None
        self._plain_steps = 0  # the plain window the next torch pass runs (--plain-steps)
        self._ran_once = False  # the workload failed when run again: no further pass runs it
        # The warmup the nsys pass dropped once its step times settled: the ncu pass drops exactly as many
        # instead of waiting for steps that ncu's launch interception slows to settle again.
        self._ncu_warmup: int | None = None
        # The torch and nsys profiles (and load notes) the ncu plan analyzed, for results() to reuse.
        self._loaded: tuple[Profile | None, Profile, list[str]] | None = None
        # The torch trace read while the nsys pass runs, for the ncu plan's analysis (hybrid.collect.preload).
        self._trace_preload: TracePreload | None = None
        # The findings (kept and below their floor) of the analysis the ncu plan made, where it made one.
        self._planned_finding_ids: list[str] | None = None
        self._child: subprocess.Popen | None = None

    # -- planning ---------------------------------------------------------------------------------
    def _check_target(self) -> None:
        if self.target.is_module:
            return
        script = Path(self.target.argv[0])
        if script.is_dir():
            raise UsageError(
                f"{script} is a directory, not a script",
                "pass the Python file to run, e.g. hybrid run train.py",
            )
        if not script.is_file():
            raise UsageError(
                f"script not found: {script}", "check the path (it is resolved from the current directory)"
            )

    def _tools(self) -> dict:
        """Which collectors exist, and why a pass will be skipped. Imported lazily: nsight/ is
        torch-free but not needed for torch-only runs."""
        from hybrid.collect import ncu_tool as ncu
        from hybrid.collect import nsys_tool as nsys

        nsys_path = nsys.find_nsys()
        ncu_path = ncu.find_ncu()
        if nsys_path:
            try:
                nsys.check_nsys_version(nsys.nsys_version(nsys_path))
            except ProfilerError as error:
                self._fallback(error.cause, error.fix)
                nsys_path = None
        return {
            "nsys": str(nsys_path) if nsys_path else None,
            "nsys_version": nsys.nsys_version(nsys_path) if nsys_path else None,
            "ncu": str(ncu_path) if ncu_path else None,
            "ncu_version": ncu.ncu_version(ncu_path) if ncu_path else None,
        }

    # -- running ----------------------------------------------------------------------------------
    def inject_flags(self, pass_name: str, *, steps: int, whole_run: bool) -> list[str]:
        """The injector's options and the target, shared by single-process and per-rank launches."""
        if self.fixed_warmup is not None:
            flags = ["--warmup", str(self.fixed_warmup), "--fixed-warmup", "--steps", str(steps)]
        elif pass_name == "ncu" and self._ncu_warmup is not None:
            flags = ["--warmup", str(self._ncu_warmup), "--fixed-warmup", "--steps", str(steps)]
        else:
            flags = ["--warmup", str(self.options.warmup), "--steps", str(steps)]
        if self.options.nvtx_modules and pass_name in ("nsys", "ncu"):
            flags.append("--nvtx-modules")
        if self.options.torch_stacks and pass_name == "torch":
            flags.append("--python-stacks")
        if self._plain_steps and pass_name == "torch":
            flags += ["--plain-steps", str(self._plain_steps), "--plain-on-cpu"]
        if self.options.verify and (pass_name == "plain" or (self._plain_steps and pass_name == "torch")):
            flags.append("--capture-loss")  # the plain steps' losses, which a fix's run is compared with
        if whole_run:
            flags.append("--whole-run")
        return flags + self._target_argv()

    def _target_argv(self) -> list[str]:
        """The injector's last options: the workload (a module with --module) after `--`."""
        return [*(["--module"] if self.target.is_module else []), "--", *self.target.argv]

    def inject_argv(self, pass_name: str, *, steps: int, whole_run: bool) -> list[str]:
        return [
            *self._injector(pass_name, self.run_dir.pass_dir(pass_name)),
            *self.inject_flags(pass_name, steps=steps, whole_run=whole_run),
        ]

    @staticmethod
    def _injector(pass_name: str, out: Path) -> list[str]:
        return [sys.executable, "-m", "hybrid.inject.script", "--pass", pass_name, "--out", str(out)]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The child must import this very package, also when it runs from a source checkout.
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        if "PYTHONSAFEPATH" not in env:
            # The working directory stays off sys.path while the injector imports (a json.py there
            # shadowed the standard library's); the injector takes both out again before the script runs
            # (hybrid.inject.script).
            env["PYTHONSAFEPATH"] = env[SAFE_PATH_ENV] = "1"
        # The workload ends itself if this process disappears without stopping it (hybrid.inject.script).
        env[HYBRID_PID_ENV] = str(os.getpid())
        env.update(self.options.extra_env)
        # One compile cache for every pass: the first compiles, the later ones load (FX graph, AOTAutograd
        # and Triton caches; tiny MLP on the CPU: 35 s compiling, 4.6 s loading).
        cache = self.run_dir.path / COMPILE_CACHE_DIR
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
        env.setdefault("TRITON_CACHE_DIR", str(cache / "triton"))
        for key, value in COMPILE_CACHE_ENV.items():
            env.setdefault(key, value)
        return env

    def _run_child(self, name: str, argv: list[str], note: str = "") -> PassResult:
        log_path = self.run_dir.pass_dir(name) / "console.log"
        self.run_dir.write_text(f"{name}/command.txt", shlex.join(argv) + "\n")
        self.progress(name, "start", note)
        started = time.monotonic()
        result = PassResult(
            name=name, status="ok", command=argv, contributed=PASS_CONTRIBUTIONS.get(name, "")
        )
        pump = _Pump(self.progress, name)
        try:
            # Line-buffered: console.log follows the script as it prints (tail -f, a test waiting on a line).
            log = open(log_path, "w", encoding="utf-8", errors="replace", buffering=1)  # noqa: SIM115 - closed below
        except OSError as error:
            raise output_error(log_path, error) from error
        with _closing_quietly(log, pump):
            # A new process group, so Ctrl-C here reaches the whole tree (nsys/ncu and the script).
            self._child = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self._env(),
                start_new_session=True,
                text=True,
                errors="replace",
                bufsize=1,
            )
            reader = threading.Thread(target=pump.run, args=(self._child, log), daemon=True)
            reader.start()
            try:
                result.returncode, result.message = self._wait_child(name)
            except (KeyboardInterrupt, Terminated) as stop:
                self._stop_child(stop.signum if isinstance(stop, Terminated) else signal.SIGINT)
                reader.join(timeout=5)
                result.status = "terminated" if isinstance(stop, Terminated) else "interrupted"
                result.message = str(stop) if isinstance(stop, Terminated) else ""
                result.wall_s = time.monotonic() - started
                result.inject = self.run_dir.read_inject(name)
                self._record_if_possible(result)
                raise
            reader.join(timeout=10)
        self._child = None
        result.wall_s = round(time.monotonic() - started, 3)
        result.inject = self.run_dir.read_inject(name)
        if result.returncode != 0:
            result.status = "failed"
        full = (
            pump.log_error
            if pump.log_error is not None
            else pump.no_space_line
            if result.returncode
            else None
        )
        if full is not None:
            # The disk (or quota, or ulimit -f) ran out: that, not the script, failed the pass.
            result.status = "failed"
            detail = full.strerror if isinstance(full, OSError) else f"the pass said: {full.strip()[:200]}"
            result.message = f"no space left ({detail})"
            self._record_if_possible(result)
            raise OutputError(
                f"no space left on the disk of {self.run_dir.path} during the {name} pass ({detail})",
                "free space there (or raise the file-size limit, ulimit -f), or pass --out on "
                "another disk; the script was not blocked and has ended",
                kept=f"what the passes wrote before the disk filled, in {self.run_dir.path}",
            )
        self.progress(name, "end", result.status)
        return result

    def run_side_pass(
        self, name: str, options: list[str], *, note: str, contributed: str, limit_s: float
    ) -> tuple[PassResult, str | None]:
        """A plain pass beside the diagnosis (a fix's run, hybrid.collect.verify), the injector given
        `options` and writing to the pass folder `name`, recorded in run.json: its process group is stopped
        after `limit_s`, and a failure of the workload is returned as its reason (None when it measured),
        never raised: the run keeps what the other passes measured."""
        argv = [
            *self._injector("plain", self.run_dir.pass_dir(name)),
            *options,
            *self._target_argv(),
        ]
        timer = threading.Timer(limit_s, self._stop_child, args=(signal.SIGTERM,))
        timer.start()
        try:
            result = self._run_child(name, argv, note)
        finally:
            timer.cancel()
        failure = self._workload_failure(result)
        result.contributed = contributed
        if (result.inject or {}).get("outcome") == "interrupted" and result.wall_s >= limit_s:
            reason: str | None = f"stopped after {limit_s:.0f} s, the limit of this pass"
        elif failure is not None:
            lines = [line.strip() for line in failure.cause.splitlines() if line.strip()]
            reason = lines[0].rstrip(":") + (f": {lines[-1]}" if len(lines) > 1 else "")
        elif result.status != "ok":
            reason = result.message or f"exit status {result.returncode}"
        elif not (result.inject or {}).get("measured_steps"):
            reason = "it measured no step"
        else:
            reason = None
        if reason is not None:
            result.status, result.contributed = "failed", f"nothing: {reason}"
        self._record(result)
        return result, reason

    def _wait_child(self, name: str) -> tuple[int, str]:
        """The pass's exit status, and why it was stopped when its process outlived its workload's record by
        AFTER_WORKLOAD_EXIT_S (a stuck collector): stopped like an interrupted pass, what it wrote is kept."""
        child = self._child
        assert child is not None
        record = self.run_dir.inject_path(name)
        recorded_at: float | None = None
        while True:
            try:
                return child.wait(timeout=1.0), ""
            except subprocess.TimeoutExpired:
                if recorded_at is None:
                    recorded_at = time.monotonic() if record.is_file() else None
                elif time.monotonic() - recorded_at > AFTER_WORKLOAD_EXIT_S:
                    self._stop_child(signal.SIGTERM)
                    code = child.wait()
                    return (code if code != 0 else 1), (
                        f"the {name} pass's process was still running {AFTER_WORKLOAD_EXIT_S:.0f} s after "
                        "the workload recorded its end (a stuck collector): it was stopped, and what it "
                        "wrote is kept"
                    )

    def _stop_child(self, signum: int) -> None:
        """Pass `signum` to the pass's whole process group (collector and workload), so it can close its
        trace and inject.json; SIGKILL after STOP_GRACE_S, so nothing is left holding the GPU."""
        child = self._child
        if child is None or child.poll() is not None:
            return
        try:
            os.killpg(child.pid, signum)
            child.wait(timeout=STOP_GRACE_S)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(timeout=STOP_GRACE_S)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass

    def _record_if_possible(self, result: PassResult) -> None:
        """_record where the run directory may be full: the error being raised matters more."""
        with contextlib.suppress(OutputError):
            self._record(result)

    def _record(self, result: PassResult) -> None:
        self.passes = [p for p in self.passes if p.name != result.name] + [result]
        self.run_dir.update_run_json(
            passes=[p.to_dict() for p in self.passes], mode_reasons=self.mode_reasons
        )

    def _workload_failure(self, result: PassResult) -> WorkloadError | None:
        """The user's script itself failed (not the profiler): exit 3, with its traceback; or it was
        killed by a signal, or ended in a way that bypassed the injector (os._exit, a hard crash)."""
        inject = result.inject or {}
        outcome = inject.get("outcome")
        signum = killing_signal(
            result.returncode, wrapped=result.name in ("nsys", "ncu"), recorded=bool(inject)
        )
        if signum is not None:
            return WorkloadError(
                killed_message(signum, result.name),
                killed_fix(signum, self.target.display),
                kept=str(self.run_dir.path),
            )
        if result.inject is None and result.returncode == 0 and result.name in ("plain", "torch"):
            # Status 0 and no record: the injector never got to write it, so the script left through
            # os._exit(0) (or exec). Running it again would repeat its side effects for nothing.
            log = self.run_dir.path / result.name / "console.log"
            return WorkloadError(
                "the workload's process ended (exit status 0) without hybrid's record of the "
                f"{result.name} pass (inject.json): the script called os._exit(), which skips the code "
                "that saves the measurements; nothing was measured, and the script is not run again",
                f"end the script normally (return, or sys.exit()) and see {log} for its output",
                kept=str(self.run_dir.path),
            )
        if outcome == "exception" or (outcome == "completed" and inject.get("exit_code") not in (0, None)):
            tb = (inject.get("traceback") or "").strip()
            cause = f"the workload failed in the {result.name} pass (exit status {inject.get('exit_code')})"
            if tb:
                cause += ":\n" + tb
            return WorkloadError(
                cause,
                f"fix the script so it runs on its own: python {self.target.display}",
                kept=str(self.run_dir.path),
            )
        return None

    # -- the passes -------------------------------------------------------------------------------
    def run(self) -> list[PassResult]:
        opts = self.options
        tools = self._tools() if opts.mode != "torch" else {}
        self.run_dir.update_run_json(
            hybrid_version=__version__,
            command=self.target.display,
            target=asdict(self.target),
            options={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
            tools=tools,
            python=sys.version.split()[0],
            started_at=time.time(),
        )
        want_nsys, want_ncu = self._plan_collectors(tools)
        started = time.monotonic()
        try:
            self._collect(tools, want_nsys, want_ncu)
        finally:
            # Compiled code the passes shared; hundreds of MB for a large model, and no use after the run.
            shutil.rmtree(self.run_dir.path / COMPILE_CACHE_DIR, ignore_errors=True)
        # Wall time of every pass, with the decisions between them (loading the export, planning ncu).
        self.run_dir.update_run_json(
            finished_at=time.time(), collection_s=round(time.monotonic() - started, 3)
        )
        return self.passes

    def _collect(self, tools: dict, want_nsys: bool, want_ncu: bool) -> None:
        opts = self.options
        if opts.baseline:
            self._run_and_check(
                "plain",
                self.inject_argv("plain", steps=opts.steps, whole_run=False),
                note=f"{opts.steps} steps, no collector (--baseline)",
            )
        self._plain_steps = 0 if opts.baseline or opts.whole_run else self.plain_window_steps
        note = (
            f"{self._plain_steps} plain steps (no collector), then {opts.steps} under torch.profiler"
            if self._plain_steps
            else ""
        )
        torch_result = self._run_and_check(
            "torch", self.inject_argv("torch", steps=opts.steps, whole_run=opts.whole_run), note=note
        )
        inject = torch_result.inject or {}
        if (rerun := self._rerun_warmup(inject)) is not None:
            torch_result = self._rerun_with_fixed_warmup(inject, rerun)
            inject = torch_result.inject or {}
        self._record_plain_window(torch_result)
        stepless = opts.whole_run or not inject.get("measured_steps")
        if (
            not stepless
            and not opts.baseline
            and not self._ok("plain")
            and inject.get("cuda_available")
            and torch_result.wall_s <= CHEAP_PLAIN_PASS_S
        ):
            self._run_and_check(
                "plain",
                self.inject_argv("plain", steps=min(opts.steps, SHORT_PLAIN_STEPS), whole_run=False),
                note="the torch pass ran without its plain window: a short plain pass",
                later=True,
            )
        if not inject.get("cuda_available"):
            if want_nsys or want_ncu:
                self._fallback(
                    "no CUDA device was used by the workload, so Nsight passes were skipped",
                    "run on a machine with an NVIDIA GPU",
                )
            want_nsys = want_ncu = False
        if stepless and not opts.whole_run:
            self._no_step_found(inject, can_capture=want_nsys)
            want_ncu = False
        if want_nsys and not self._ran_once:
            self._nsys_pass(tools, stepless, preload=want_ncu and opts.mode != "hybrid" and not stepless)
            if want_ncu and self._ok("nsys"):
                self._ncu_pass(tools, stepless)
        from hybrid.collect.calibration_pass import pass_row
        from hybrid.replay.realized import device_key, snapshot

        snapshot(self.run_dir.path, device_key(inject))  # the history this run's replay is corrected by
        cuda_used = bool(inject.get("cuda_available"))
        row = pass_row(
            self.run_dir,
            enabled=opts.calibrate,
            cuda_used=cuda_used,
            env=self._env(),
            progress=self.progress,
            finding_ids=self._planned_finding_ids,
        )
        if row is not None:
            self._record(PassResult(**row))
        if opts.verify:
            from hybrid.collect.verify import verify_fixes

            verify_fixes(self, opts.verify)

    def _rerun_warmup(self, inject: dict) -> int | None:
        """The warmup a second torch pass drops when the first could not measure what was asked, else None:
        - the plain window took steps the torch window then lacked (the script ended first): measure, without
          the window, the --steps the script's length allows after the warmup the first pass dropped;
        - the script ran enough steps for --warmup and --steps, but warmup kept waiting for step times to
          settle (noisy machines, steps of different lengths) until it ended: measure its last --steps."""
        if self.options.whole_run or self.fixed_warmup is not None:
            return None
        seen = inject.get("steps_seen") or 0
        measured = inject.get("measured_steps") or 0
        if inject.get("plain_window") and measured < self.options.steps:
            warmup = max(inject.get("warmup_dropped") or 0, seen - self.options.steps)
            return warmup if seen > warmup else None
        if not measured and seen >= self.options.warmup + self.options.steps:
            return seen - self.options.steps
        return None

    def _rerun_with_fixed_warmup(self, inject: dict, warmup: int) -> PassResult:
        """Measure the steps the script's now known length allows: measuring steps that had not quite
        settled beats measuring none. Every later pass drops the same steps; no plain window this time."""
        seen = inject["steps_seen"]
        self.fixed_warmup = warmup
        self._plain_steps = 0
        if inject.get("plain_window"):
            why = (
                f"the script ran {seen} steps, too few for the plain window ({self.plain_window_steps} "
                f"steps, no collector) before the {self.options.steps} measured ones"
            )
        else:
            why = (
                f"the script ran {seen} steps and their times had not settled within "
                f"{settle.SETTLE_TOLERANCE:.0%} when it ended"
            )
        measured = min(self.options.steps, seen - warmup)
        reason = (
            f"{warmup} warmup steps dropped: {why}, so every pass measured its last {measured} "
            "(the torch pass was run a second time to measure them)"
        )
        self.mode_reasons.append(reason)
        self.run_dir.update_run_json(fixed_warmup={"warmup": self.fixed_warmup, "reason": reason})
        return self._run_and_check(
            "torch",
            self.inject_argv("torch", steps=self.options.steps, whole_run=False),
            note=f"again, measuring the script's last {measured} steps",
        )

    def _record_plain_window(self, torch_result: PassResult) -> None:
        """The plain window the torch pass's process timed before torch.profiler started, as the run's
        plain pass (run.json passes: process "torch", wall_s the window's own time)."""
        window = (torch_result.inject or {}).get("plain_window") or {}
        if not window.get("complete") or not window.get("window_ns"):
            return
        self._record(
            PassResult(
                name="plain",
                status="ok",
                wall_s=round(window["window_ns"] / 1e9, 3),
                process="torch",
                command=torch_result.command,
                inject={**window, "pass": "plain"},
                contributed=(
                    f"the reference step time: {window['measured_steps']} steps without a collector, "
                    "in the torch pass's process before torch.profiler started"
                ),
            )
        )

    def _no_step_found(self, inject: dict, can_capture: bool) -> None:
        """The torch pass measured nothing. Its script is not run again as a whole-run torch pass: the
        nsys pass, which runs anyway, captures the whole run instead, and its export's step chain
        finds the steps (start-up excluded). Without nsys nothing can be analyzed: stop and say why."""
        seen = inject.get("steps_seen") or 0
        unit = inject.get("step_unit")
        if seen:
            cause = (
                f"the script ended during warmup after {seen} steps{f' of {unit}' if unit else ''}, "
                f"before a measured step (it needs at least {self.options.warmup} warmup + "
                f"{self.options.steps} measured steps)"
            )
            fix = "lower --warmup and --steps, or let the script run more iterations"
        else:
            cause = (
                "no step was found in the torch pass (no optimizer step, no mark, no repeated module call, "
                "no loop of the script whose iterations did work)"
            )
            fix = (
                "mark steps with hybrid.mark_step(), or pass --whole-run to profile the whole script "
                "as one range"
            )
        if can_capture:
            self.mode_reasons.append(
                f"{cause}; the script was not re-run for it: the nsys pass captured the whole "
                "run and its steps were found in the timeline; the ncu pass was skipped "
                f"(no step to bound its replay); {fix}"
            )
            return
        raise ProfilerError(
            f"{cause}, and without an Nsight Systems capture there is no timeline to find steps "
            "in; hybrid does not re-run the script on its own (it may have side effects)",
            fix,
            kept=str(self.run_dir.path),
        )

    def _ok(self, name: str) -> bool:
        return any(p.name == name and p.status == "ok" for p in self.passes)

    def _plan_collectors(self, tools: dict) -> tuple[bool, bool]:
        mode = self.options.mode
        if mode == "torch":
            self.mode_reasons.append("torch-only mode was asked for (--mode torch)")
            return False, False
        want_nsys = want_ncu = True
        if not tools.get("nsys"):
            self._fallback(
                "Nsight Systems (nsys) was not found",
                "install Nsight Systems, put nsys on PATH, or set HYBRID_NSYS=/path/to/nsys",
            )
            want_nsys = want_ncu = False
        if mode != "nsys" and not tools.get("ncu") and want_ncu:
            self._fallback(
                "Nsight Compute (ncu) was not found",
                "install Nsight Compute, put ncu on PATH, or set HYBRID_NCU=/path/to/ncu",
            )
            want_ncu = False
        if mode == "nsys":
            want_ncu = False
            self.mode_reasons.append(f"{NCU_SKIPPED_WARNING} --mode nsys")
        return want_nsys, want_ncu

    def _fallback(self, cause: str, fix: str) -> None:
        """Under --mode auto a missing collector only narrows the run; an explicit mode fails."""
        if self.options.mode in ("hybrid", "nsys"):
            raise ProfilerError(
                f"{cause}, and --mode {self.options.mode} needs it", fix, kept=str(self.run_dir.path)
            )
        self.mode_reasons.append(f"{cause}: falling back ({fix})")

    def _run_and_check(
        self, name: str, argv: list[str], note: str = "", *, later: bool = False
    ) -> PassResult:
        result = self._run_child(name, argv, note)
        self._record(result)
        failure = self._workload_failure(result)
        if failure is not None and later:
            self._failed_when_run_again(result, failure)
            return result
        if failure is not None:
            raise failure
        if result.status != "ok":
            raise ProfilerError(
                f"the {name} pass exited with status {result.returncode} without a "
                f"usable result; see {self.run_dir.pass_dir(name) / 'console.log'}",
                "read the log; rerun with --mode torch to narrow it down",
                kept=str(self.run_dir.path),
            )
        return result

    def _failed_when_run_again(self, result: PassResult, failure: WorkloadError) -> None:
        """The workload failed in a pass after the torch pass had measured its steps: a script that cannot
        run more than once (it consumes its input, or refuses to overwrite what it wrote) fails there. The
        run keeps the windows its first process gave (torch and plain) and says which passes it could not
        run; with nothing measured yet, or under an explicit --mode, the failure stands (exit 3)."""
        torch_inject = next((p.inject for p in self.passes if p.name == "torch"), None) or {}
        if not torch_inject.get("measured_steps") or self.options.mode in ("hybrid", "nsys"):
            raise failure
        order = ["plain", "nsys", "ncu"]
        skipped = [
            name
            for name in order[order.index(result.name) + 1 :]
            if not any(p.name == name for p in self.passes)
        ]
        lines = [line.strip() for line in failure.cause.splitlines() if line.strip()]
        why = lines[0].rstrip(":") + (f": {lines[-1]}" if len(lines) > 1 else "")
        result.status = "failed"
        result.message = "the workload failed when run again"
        result.contributed = f"nothing: {why}"
        self._ran_once = True
        self.mode_reasons.append(
            f"{why}, after the torch pass had measured: a script that cannot run more than once (it consumes "
            "its input, or refuses to overwrite its outputs) gets the windows of its first process, "
            f"torch.profiler and the plain steps before it; not run: {', '.join([result.name, *skipped])}"
            f"; see {self.run_dir.pass_dir(result.name) / 'console.log'}"
        )
        self._record(result)

    def _collector_failed(self, name: str, error: ProfilerError) -> None:
        result = next((p for p in self.passes if p.name == name), PassResult(name=name, status="failed"))
        result.status = "failed"
        result.message = error.message()
        self._record(result)
        if self.options.mode in ("hybrid", "nsys") and not (name == "ncu" and self.options.mode == "nsys"):
            raise error
        self.mode_reasons.append(f"{name} pass failed, falling back: {error.cause}")

    def _nsys_pass(self, tools: dict, stepless: bool, preload: bool = False) -> None:
        """The nsys pass; with `preload`, the torch trace the ncu plan will analyze is read meanwhile."""
        from hybrid.collect import nsys_tool as nsys
        from hybrid.collect.preload import preload_trace

        out_base = self.run_dir.pass_dir("nsys") / "profile"
        # With no step found by the torch pass, nsys records the whole run (no capture range) while
        # the injector still looks for steps: its step ranges, where it finds some, or else the
        # export's own step chain decide what a step is.
        inner = self.inject_argv("nsys", steps=self.options.steps, whole_run=self.options.whole_run)
        sampling = nsys.callsite_sampling(nsys.profile_help(Path(tools["nsys"])), self.options.callsites)
        if sampling.missing:
            self.mode_reasons.append(
                f"this nsys has no {', '.join(sampling.missing)}: findings get fewer or no "
                "callsites (a newer Nsight Systems samples Python)"
            )
        argv = nsys.build_nsys_command(
            Path(tools["nsys"]), out_base, inner, capture_range=not stepless, sampling=sampling
        )
        if preload:
            self._trace_preload = preload_trace(self.run_dir.torch_trace())
        result = self._run_child("nsys", argv)
        self._record(result)
        failure = self._workload_failure(result)
        if failure is not None:
            self._failed_when_run_again(result, failure)
            return
        try:
            log = (self.run_dir.pass_dir("nsys") / "console.log").read_text(errors="replace")
            if sampling.separate_export and Path(f"{out_base}.nsys-rep").is_file():
                log += nsys.export_sqlite(
                    Path(tools["nsys"]), out_base, log_path=self.run_dir.pass_dir("nsys") / "export.log"
                )
            nsys.check_export(out_base, result.returncode, log)
        except ProfilerError as error:
            self._collector_failed("nsys", error)

    @staticmethod
    def _launch_configs(profile, kernel_names: list[str]) -> int:
        """How many launches ncu will replay: one per distinct (function base name, grid, block) of the
        selected names in a step (hybrid.collect.ncu_plan.replayed_launches)."""
        from hybrid.collect.ncu_plan import replayed_launches

        kernels = profile.kernels
        return replayed_launches(kernels[kernels["step"] == 0], kernel_names) or replayed_launches(
            kernels, kernel_names
        )

    def _ncu_plan(self, profile: Profile, analysis: dict | None, candidates: list[str]) -> NcuPlan:
        """Whether counters can change this run's diagnosis, and on which kernels (--mode auto only)."""
        from hybrid.collect.ncu_plan import NcuPlan, plan_ncu

        if analysis is None:
            return NcuPlan(True, "the run could not be analyzed before the ncu pass")
        try:
            return plan_ncu(analysis, profile, candidates, forced=False, budget_s=self.options.ncu_budget_s)
        except Exception as error:  # noqa: BLE001 - a failed estimate must not cost the counters: ncu runs
            return NcuPlan(True, f"the plan failed ({type(error).__name__}: {error})")

    def _analyze_before_ncu(self) -> tuple[Profile, dict | None]:
        """The nsys profile, and the analysis of the torch and nsys passes the ncu plan rests on (about 2 s
        for resnet50 on 2 loaded cores). The profiles loaded for it are kept: the run's final analysis reuses
        them, with the counters of the ncu pass where it ran (results())."""
        from copy import deepcopy

        from hybrid.load.nsys_export import load_nsys_export
        from hybrid.pipeline import analyze_artifacts, load_run_dir

        self.progress("ncu", "start", "deciding whether counters can change the diagnosis")
        try:
            notes: list[str] = []
            preload, self._trace_preload = self._trace_preload, None
            run, torch_profile, nsys_profile, _ = load_run_dir(
                self.run_dir.path, notes=notes, load_torch=preload.loader() if preload else None
            )
            if nsys_profile is None:
                raise ProfilerError("the nsys export has no kernels", "")
            analysis = analyze_artifacts(
                run, deepcopy(torch_profile), deepcopy(nsys_profile), None, notes=list(notes)
            )
        except Exception:  # noqa: BLE001 - a failed estimate must not cost the counters: ncu runs
            return load_nsys_export(self.run_dir.nsys_export()), None
        self._loaded = (torch_profile, deepcopy(nsys_profile), notes)
        diagnosis = (analysis or {}).get("diagnosis") or {}
        self._planned_finding_ids = [
            str(f.get("id"))
            for f in (diagnosis.get("bottlenecks") or []) + (diagnosis.get("below_floor") or [])
        ]
        return nsys_profile, analysis

    def results(self) -> dict:
        """The run's analysis (results.json); it reuses the torch and nsys profiles loaded for the ncu plan,
        with the counters that came after them where the ncu pass ran (resnet50 b32 on 2 loaded cores: 2.5 s
        of loading saved)."""
        from hybrid.pipeline import analyze_artifacts, analyze_run_dir

        loaded, self._loaded = self._loaded, None
        run = RunDir.open(self.run_dir.path)
        counters = run.ncu_csv()
        ncu_ran = any(p.name == "ncu" and p.status != "skipped" for p in self.passes)
        # Counters only in ncu's own report, or none after an ncu pass that ran: the loader's way, in full.
        if loaded is None or (ncu_ran and counters is None):
            return analyze_run_dir(self.run_dir.path)
        torch_profile, nsys_profile, notes = loaded
        return analyze_artifacts(run, torch_profile, nsys_profile, counters if ncu_ran else None, notes=notes)

    def _ncu_pass(self, tools: dict, stepless: bool) -> None:
        from hybrid.collect import ncu_tool as ncu
        from hybrid.load.ncu_match import select_kernels
        from hybrid.load.nsys_export import load_nsys_export
        from nsight import ncu_metrics

        planned = self.options.mode != "hybrid" and not stepless
        budget: dict | None = None  # where the plan's replay budget cut the kernels (NcuPlan.budget)
        if planned:
            profile, analysis = self._analyze_before_ncu()
        else:
            profile, analysis = load_nsys_export(self.run_dir.nsys_export()), None
        kernel_names = select_kernels(
            profile.kernels, coverage=self.options.ncu_coverage, cap=self.options.ncu_kernels
        )
        if not kernel_names:
            reason = (
                profile.extras.get("nsys", {}).get("no_kernels_reason") or "the workload launched no kernel"
            )
            self._collector_failed(
                "ncu",
                ProfilerError(
                    f"the nsys pass captured no kernels to replay under ncu: {reason}",
                    "check that the workload launches CUDA kernels in its "
                    "measured steps, in the process hybrid started",
                ),
            )
            return
        if planned:
            plan = self._ncu_plan(profile, analysis, kernel_names)
            self.run_dir.update_run_json(
                ncu_plan={
                    "run": plan.run,
                    "reason": plan.reason,
                    "kernels": plan.kernel_names,
                    "headroom_ms": plan.headroom_ms,
                    "movable_ms": plan.movable_ms,
                    "budget": plan.budget,
                }
            )
            self.progress(
                "ncu",
                "end",
                "counters can change the diagnosis: ncu runs"
                if plan.run
                else "skipped: counters cannot change the primary finding or a severity",
            )
            if not plan.run:
                self.mode_reasons.append(f"{NCU_SKIPPED_WARNING} {plan.reason}; --mode hybrid runs it")
                self._record(
                    PassResult(
                        name="ncu",
                        status="skipped",
                        contributed=plan.reason,
                        message="counters cannot change the primary or a severity",
                    )
                )
                return
            if plan.kernel_names:
                self.mode_reasons.append(
                    f"{NCU_PLANNED_WARNING}{len(plan.kernel_names)} of {len(kernel_names)} "
                    f"selected kernels: {plan.reason}"
                )
                kernel_names = plan.kernel_names
            budget = plan.budget
        self.run_dir.write_text("ncu/selected_kernels.json", json.dumps(kernel_names, indent=1))
        nsys_dropped = (self.run_dir.read_inject("nsys") or {}).get("warmup_dropped")
        if isinstance(nsys_dropped, int) and nsys_dropped >= self.options.warmup and not stepless:
            self._ncu_warmup = nsys_dropped
        ncu_dir = self.run_dir.pass_dir("ncu")
        # One measured step is enough: the counters describe kernels, and nsys already gave the timeline.
        inner = self.inject_argv("ncu", steps=1, whole_run=stepless)
        argv = ncu.build_ncu_command(
            Path(tools["ncu"]),
            ncu_dir / ncu.REPORT_NAME,
            inner,
            # The window between the injector's cudaProfilerStart/Stop, on every
            # thread: an NVTX step filter would only see the launching thread and
            # miss the backward pass, which autograd launches from its own thread.
            kernel_names=kernel_names,
            measured_window=not stepless,
            metrics=ncu_metrics.METRICS,
            one_per_config=True,
        )
        configs = self._launch_configs(profile, kernel_names)
        self.progress("ncu", "total", str(configs))
        result = self._run_child(
            "ncu",
            argv,
            note=f"replaying {configs} launch configurations of "
            f"{len(kernel_names)} kernels (counters cost ~0.4 s each)",
        )
        if budget and result.status == "ok":
            result = replace(
                result,
                message=f"{budget['launches']} of {budget['launches_wanted']} launches: "
                f"{budget['budget_s']:g} s replay budget",
            )
        self._record(result)
        failure = self._workload_failure(result)
        if failure is not None:
            self._failed_when_run_again(result, failure)
            return
        try:
            console = (ncu_dir / "console.log").read_text(errors="replace")
            if ncu.finish_pass(
                Path(tools["ncu"]),
                ncu_dir / ncu.REPORT_NAME,
                ncu_dir / "counters.csv",
                ncu_dir / "ncu.log",
                result.returncode,
                console,
            ):
                self.mode_reasons.append("ncu stopped early: counters cover only the kernels it profiled")
        except ProfilerError as error:
            self._collector_failed("ncu", error)
