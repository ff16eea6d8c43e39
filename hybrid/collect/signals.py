"""Signals in both directions: hybrid stopped from outside (SIGTERM, SIGHUP: raised as Terminated so
the running pass is stopped and kept), and a workload killed by a signal (exit 3, naming the signal
and what usually sends it)."""

from __future__ import annotations

import signal
from types import FrameType

from hybrid.errors import EXIT_SIGNAL_BASE, Terminated

# Signals that stop hybrid the way Ctrl-C does; each is passed on to the running pass's process group.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

# signal -> (what usually sends it, what to do; {command} is the script's command line).
OOM_CAUSE = "most often the kernel's out-of-memory killer (host RAM ran out) or a job scheduler's limit"
OOM_FIX = (
    "check `dmesg | grep -i -e oom -e killed` and the job's memory limit; lower the batch size or workers"
)
LIKELY_CAUSE = {
    signal.SIGKILL: (OOM_CAUSE, OOM_FIX),
    signal.SIGSEGV: (
        "a crash in native code: a C++/CUDA extension, a library or driver bug, or a stack overflow",
        "see where it crashes: python -X faulthandler {command}",
    ),
    signal.SIGBUS: (
        (
            "a bus error: usually shared memory (/dev/shm) or a memory-mapped file ran out, as with "
            "DataLoader workers in a container"
        ),
        "give the container more shared memory (--shm-size) or check the memory-mapped files",
    ),
    signal.SIGABRT: (
        (
            "an abort in native code: a failed C++ assertion or an uncaught C++ exception "
            "(its message is at the end of console.log)"
        ),
        "read the end of the pass's console.log, or run the script alone: python {command}",
    ),
    signal.SIGFPE: (
        "an arithmetic fault in native code (an integer division by zero)",
        "run the script alone",
    ),
    signal.SIGILL: (
        "an illegal instruction: a library built for another CPU",
        "reinstall the library for this machine",
    ),
    signal.SIGTERM: (
        "stopped from outside (a scheduler, a timeout or another process sent SIGTERM)",
        "check what stops processes on this machine (job time limits)",
    ),
    signal.SIGINT: ("interrupted from outside (SIGINT)", "run it again"),
    signal.SIGHUP: ("its terminal or session went away (SIGHUP)", "run it under nohup, tmux or a scheduler"),
    signal.SIGXCPU: ("its CPU-time limit ran out (ulimit -t)", "raise the limit (ulimit -t)"),
    signal.SIGXFSZ: (
        "it exceeded the file-size limit (ulimit -f)",
        "raise the limit (ulimit -f) or free space",
    ),
}
# A wrapper (nsys, ncu) reports its workload's death by signal N as exit status 128 + N.
WRAPPED_SIGNAL_STATUSES = range(EXIT_SIGNAL_BASE + 1, EXIT_SIGNAL_BASE + 65)


def killing_signal(returncode: int | None, *, wrapped: bool, recorded: bool) -> int | None:
    """The signal that killed a pass's process, or None. A negative status is a signal (Popen's way);
    under a collector, 128 + N counts only when the injector left no record (it never finished)."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if wrapped and not recorded and returncode in WRAPPED_SIGNAL_STATUSES:
        return returncode - EXIT_SIGNAL_BASE
    return None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def killed_message(signum: int, pass_name: str) -> str:
    cause = LIKELY_CAUSE.get(signum)
    text = f"the workload was killed by {signal_name(signum)} in the {pass_name} pass"
    return f"{text}: {cause[0]}" if cause else text


def killed_fix(signum: int, command: str) -> str:
    cause = LIKELY_CAUSE.get(signum)
    fix = cause[1] if cause else "run the script alone to see why it is killed: python {command}"
    return (
        fix.format(command=command) if "{command}" in fix else f"{fix} (the script alone: python {command})"
    )


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    # Once only: a second signal must not cut the stopping of the pass short.
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
    raise Terminated(signum)


def install_stop_handlers() -> None:
    """SIGTERM and SIGHUP become Terminated in the main thread (a no-op elsewhere)."""
    try:
        for stop in STOP_SIGNALS:
            signal.signal(stop, _raise_terminated)
    except ValueError:  # not the main thread (hybrid used as a library from a worker thread)
        pass
