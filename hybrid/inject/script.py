"""Run a user's script or module as `__main__` inside a StepSession (one profiling pass).

    python -m hybrid.inject.script --pass P --out DIR --warmup W --steps N [--plain-steps K] [--nvtx-modules]
                            [--whole-run] [--fixed-warmup] [--module] [--apply-fix FIX [--paired STEPS]
                            [--loader-workers N]] [--capture-loss]
                            -- TARGET [ARGS...]

The script sees `sys.argv == [TARGET, *ARGS]` (with --module, argv[0] is the module's file, as
under `python -m`), its own directory first on sys.path, and the caller's cwd. The process exits
with the script's status: 0 when stopped at the step limit, 1 (traceback printed) when it raised,
its own code on SystemExit, 130 on Ctrl-C, SIGTERM or SIGHUP. OUT/inject.json is written in every case.

This module imports only the standard library and hybrid.inject.stepping (no pandas): it runs inside
every profiled process, before the user's code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from hybrid.errors import EXIT_USAGE, HybridError
from hybrid.inject import apply_fix, numerics, run_config
from hybrid.inject.step_finder import script_marks_steps
from hybrid.inject.stepping import EXCEPTION, PASSES, STEP_LIMIT, SessionConfig, StepSession, outcome_of

# The pid of the `hybrid run` that started this pass (hybrid.collect.orchestrate sets it), and how often the
# script checks that it still runs.
HYBRID_PID_ENV = "HYBRID_PID"
PARENT_POLL_S = 1.0
# Set by hybrid.collect.orchestrate beside PYTHONSAFEPATH=1, which keeps the working directory off sys.path
# while this
# injector imports (a json.py there would otherwise replace the standard library's for hybrid); both are taken
# out of the environment before the script runs, so the processes it starts see the variables it was given.
SAFE_PATH_ENV = "HYBRID_SAFE_PATH"
# How long the script's own non-daemon threads get to end after hybrid stopped it at the step limit: nothing
# told them to stop, and a producer thread looping forever would keep the pass (and hybrid) waiting forever.
LINGER_S = 10.0
# Seconds in place of LINGER_S, for a workload whose threads are known to outlive it (its test waits 1 s).
LINGER_ENV = "HYBRID_LINGER_S"


def _linger_s() -> float:
    with contextlib.suppress(ValueError):
        return max(0.0, float(os.environ.get(LINGER_ENV, LINGER_S)))
    return LINGER_S


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hybrid.inject.script",
        description="Run TARGET as __main__ under one hybrid profiling pass.",
        usage="%(prog)s --pass P --out DIR [options] -- TARGET [ARGS...]",
    )
    parser.add_argument("--pass", dest="pass_name", required=True, choices=PASSES)
    parser.add_argument("--out", required=True, type=Path, help="directory for inject.json (and trace.json)")
    parser.add_argument("--warmup", type=int, default=1, help="steps to run before measuring")
    parser.add_argument("--steps", type=int, default=5, help="steps to measure, then stop the script")
    parser.add_argument(
        "--plain-steps",
        type=int,
        default=0,
        help="after warmup, time this many steps with no collector (the plain window), then "
        "start the pass's collector; only where the script uses CUDA unless --plain-on-cpu",
    )
    parser.add_argument("--plain-on-cpu", action="store_true", help="the plain window also on a CPU-only run")
    parser.add_argument("--nvtx-modules", action="store_true", help="NVTX range per module forward")
    parser.add_argument("--whole-run", action="store_true", help="capture the whole script as one step")
    parser.add_argument(
        "--fixed-warmup",
        action="store_true",
        help="exactly --warmup warmup steps, not more until step times settle",
    )
    parser.add_argument("--module", action="store_true", help="TARGET is a module name, run as with -m")
    parser.add_argument(
        "--python-stacks",
        action="store_true",
        help="torch pass: record operators' Python stacks (with_stack), for callsites",
    )
    parser.add_argument(
        "--apply-fix",
        choices=sorted(apply_fix.FIXES),
        help="switch this fix on before the script runs (hybrid run --verify); OUT/fix.json says what it did",
    )
    parser.add_argument(
        "--paired",
        type=int,
        metavar="STEPS",
        help="with --apply-fix of a flag (tf32, cudnn_benchmark): after warmup, time STEPS steps with the "
        "fix, STEPS without, STEPS with again, in this process (OUT/fix.json `paired`); --steps covers them",
    )
    parser.add_argument(
        "--loader-workers",
        type=int,
        metavar="N",
        help="with --apply-fix loader_workers: the workers to give a DataLoader built without (default: "
        "one a core this process may use, up to 4)",
    )
    parser.add_argument(
        "--capture-loss",
        action="store_true",
        help="seed the random generators and write the loss of each step without a collector to "
        "OUT/loss.json (hybrid run --verify compares them)",
    )
    return parser


def _split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Options before `--`, the target command after it (the target's own options stay its own)."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Drop the leading frames of this injector and runpy, so the printed traceback starts in the
    user's code, as it would without hybrid."""
    # runpy is usually frozen: its frames then name "<frozen runpy>" rather than its file.
    own_files = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}
    while tb is not None and tb.tb_next is not None and _frame_file(tb) in own_files:
        tb = tb.tb_next
    return tb


def _frame_file(tb: TracebackType) -> str:
    filename = tb.tb_frame.f_code.co_filename
    return filename if filename.startswith("<") else os.path.abspath(filename)


def _interrupt_on_signal(_signum: int, _frame: FrameType | None) -> None:
    from hybrid.inject.stepping import active_session

    # Once only: a second signal must not cut the writing of the trace and inject.json short.
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_IGN)
    session = active_session()
    if session is not None and session.finishing:
        return
    raise KeyboardInterrupt


def _stop_like_ctrl_c() -> None:
    """SIGTERM and SIGHUP (hybrid passes them on when it is stopped) end the script as Ctrl-C does, so
    what was measured is written. A handler already installed (rank_inject's, the script's own
    later) is left alone."""
    for stop in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(stop) is signal.SIG_DFL:
            signal.signal(stop, _interrupt_on_signal)


def _end_when_hybrid_is_gone(pid: int, log: Path) -> None:
    """hybrid stopped without passing a signal on (SIGKILL, or a collector that keeps its target out of
    its process group): end the script as SIGTERM does, writing what it measured, rather than leave an
    orphan holding the GPU. Polls from a daemon thread; a process that is not ours at that pid (a
    PermissionError) means hybrid is gone too. The script's output went to a pipe hybrid read: from
    here on it is appended to the pass's console.log, so neither the script nor the injector dies
    writing to a pipe nobody reads."""
    while True:
        time.sleep(PARENT_POLL_S)
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            break
    try:
        target = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError:
        target = os.open(os.devnull, os.O_WRONLY)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.kill(os.getpid(), signal.SIGTERM)


def _watch_hybrid(out_dir: Path) -> None:
    pid = os.environ.get(HYBRID_PID_ENV, "")
    if pid.isdigit() and int(pid) != os.getpid():
        threading.Thread(
            target=_end_when_hybrid_is_gone,
            args=(int(pid), out_dir / "console.log"),
            name="hybrid-watch",
            daemon=True,
        ).start()


def _run_target(target: str, as_module: bool) -> dict:
    """The script's globals once it has run to its end (runpy's copy of them)."""
    if as_module:
        # alter_sys: argv[0] becomes the module's file and __main__ is that module, as under `python -m`.
        return runpy.run_module(target, run_name="__main__", alter_sys=True)
    return runpy.run_path(target, run_name="__main__")


def main(argv: list[str] | None = None) -> int:
    options, command = _split_argv(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(options)
    # Absolute before the script runs: one that changes its working directory must not move the outputs.
    args.out = args.out.absolute()
    if not command:
        parser.error("no target: put the script (or, with --module, the module) after `--`")
    if args.paired is not None and (args.apply_fix not in apply_fix.TOGGLES or args.paired < 1):
        parser.error(
            f"--paired takes STEPS >= 1 and --apply-fix among {', '.join(sorted(apply_fix.TOGGLES))}"
        )
    if args.loader_workers is not None and (args.apply_fix != "loader_workers" or args.loader_workers < 1):
        parser.error("--loader-workers takes N >= 1 with --apply-fix loader_workers")
    target, target_args = command[0], command[1:]
    if not args.module and not os.path.isfile(target):
        print(
            f"error: script {target!r} not found (cwd {os.getcwd()})\n"
            "fix: pass an existing script path, or use --module for a module name",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        session = StepSession(
            SessionConfig(
                pass_name=args.pass_name,
                out_dir=args.out,
                warmup_steps=args.warmup,
                measured_steps=args.steps,
                nvtx_modules=args.nvtx_modules,
                whole_run=args.whole_run,
                progress=True,
                detect=True,
                settle=not args.fixed_warmup,
                # The user's code is what lies under the script's directory (its own helper modules
                # included), the installed libraries excepted; for a module, under the working directory.
                user_root=os.getcwd() if args.module else os.path.dirname(os.path.abspath(target)),
                marked_by_script=not args.module and script_marks_steps(target),
                python_stacks=args.python_stacks,
                plain_steps=args.plain_steps,
                plain_on_cpu=args.plain_on_cpu,
            )
        )
        session.begin()
        run_config.install()  # before the target runs: its autocast regions and torch.compile calls
        if args.capture_loss:
            numerics.install()
        if args.apply_fix:
            paired = {"paired_after": args.warmup, "segment_steps": args.paired} if args.paired else {}
            fix_options = {"workers": args.loader_workers} if args.loader_workers else {}
            apply_fix.apply(args.apply_fix, fix_options, **paired)
    except HybridError as exc:
        print(exc.message(), file=sys.stderr)
        return exc.exit_code

    _stop_like_ctrl_c()
    _watch_hybrid(args.out)
    sys.argv = [target, *target_args]
    first_path = os.getcwd() if args.module else os.path.dirname(os.path.abspath(target))
    if os.environ.pop(SAFE_PATH_ENV, None) is not None:
        # PYTHONSAFEPATH left the working directory out: add what `python script.py` / `python -m` puts first.
        os.environ.pop("PYTHONSAFEPATH", None)
        sys.path.insert(0, first_path)
    elif not args.module:
        # As `python script.py` does: the script's directory replaces this injector's path entry.
        sys.path[0] = first_path
    # A script that ends before its window does is read (session.finish: its DataLoaders, optimizers) with
    # its objects still alive: a 32-batch eval loop's DataLoader was gone by then, and the advice said the
    # script used none.
    script_globals: dict = {}
    try:
        script_globals = _run_target(target, args.module)
        ended: BaseException | None = None
    except BaseException as exc:  # noqa: BLE001 - every ending is recorded, then reported as Python would
        ended = exc
    outcome, exit_code, traceback_text = outcome_of(ended)
    global _stopped_at_limit
    _stopped_at_limit = outcome == STEP_LIMIT
    if outcome == EXCEPTION:
        traceback_text = "".join(
            traceback.format_exception(type(ended), ended, _user_frames(ended.__traceback__))
        )
    # The record first: printing can fail (a closed pipe) and must not cost what was measured.
    session.finish(outcome, exit_code, traceback_text)
    script_globals.clear()
    with contextlib.suppress(OSError):
        if args.capture_loss:
            numerics.write(args.out)
        apply_fix.write(args.out)
    with contextlib.suppress(OSError):
        if outcome == EXCEPTION:
            sys.stderr.write(traceback_text)
        elif isinstance(ended, SystemExit) and exit_code == 1 and not isinstance(ended.code, int):
            print(ended.code, file=sys.stderr)  # sys.exit("message") prints its message, as Python does
    return exit_code


_stopped_at_limit = False


def _end_idle_pool_workers() -> None:
    """A concurrent.futures worker waits on its queue until the interpreter's exit hook tells it to end
    (Inductor's compile threads: a torch.compile'd script stopped at the step limit on the CPU waited the
    whole LINGER_S for two idle ones). Tell them now, as that hook does, without its unbounded join: idle
    workers end at once, busy ones after their item."""
    pool: Any = sys.modules.get("concurrent.futures.thread")
    if pool is None:
        return
    with contextlib.suppress(AttributeError):  # the hook's names, as in CPython 3.9 to 3.13
        with pool._global_shutdown_lock:
            pool._shutdown = True
        for queue in list(pool._threads_queues.values()):
            queue.put(None)


def _exit_past_lingering_threads(code: int) -> None:
    """After hybrid stopped the script at the step limit, give its non-daemon threads LINGER_S (LINGER_ENV's
    seconds where set) to end, then end the process anyway (what was measured is written by then), saying so
    on stderr."""
    _end_idle_pool_workers()
    linger_s = _linger_s()
    deadline = time.monotonic() + linger_s
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    left = [
        t.name
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]
    if left:
        with contextlib.suppress(OSError):
            print(
                f"hybrid: the script's thread(s) {', '.join(left)} still ran {linger_s:.0f} s after its "
                "measured steps were written; ending the process",
                file=sys.stderr,
                flush=True,
            )
            sys.stdout.flush()
        os._exit(code)


if __name__ == "__main__":
    status = main()
    if _stopped_at_limit:
        _exit_past_lingering_threads(status)
    sys.exit(status)
