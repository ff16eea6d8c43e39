"""Find the Nsight Systems CLI, build its command line, run it, and check it left an export.

Torch-free and pandas-free: the orchestrator imports this before deciding which passes to run.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nsight.errors import ToolFailed
from nsight.locate import find_tool
from nsight.tool_probe import probe_timeout_s, run_bounded

NSYS_ENV = "HYBRID_NSYS"

# Searched in order after $HYBRID_NSYS and PATH; within one pattern the newest version wins. Nsight
# Compute ships an nsys CLI inside its own folder, which is often the only one on a CUDA image.
NSYS_GLOBS = (
    "/opt/nvidia/nsight-systems*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/usr/local/cuda*/nsight-systems*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/opt/nvidia/nsight-compute/*/target-linux-x64/nsys",
)

# Every flag build_nsys_command passes (--cuda-graph-trace, --capture-range-end, --cpuctxsw) is in the
# CLI of 2023.1 and later; the oldest release we have seen take all of them together. Older ones fail with
# "unrecognised option", which says nothing useful, so we refuse them up front with a message naming the fix.
MIN_NSYS_VERSION = (2023, 1)

# What the pass traces: CUDA API calls and device activity, and NVTX ranges (the injector's steps and
# modules). Not OS-runtime calls (osrt): nothing in the analysis reads them, and tracing them cost 3.0 and
# 6.1 s of the nsys pass on resnet50 b64 in two runs on an H100 (19.7 -> 13.5 s, 16.4 -> 13.4 s,
# benchmarks/probe/nsys_pass_options.sh, session 22).
TRACE = "cuda,nvtx"

# Python callsites (which line of the user's script a host-side finding happens on). Python
# sampling records the interpreter's stack of every thread that runs Python at this rate; 1 kHz puts
# about one sample in each millisecond of host time, enough for the millisecond-scale gaps a
# finding is made of. Python backtraces on CUDA calls ("cuda" level) need CPU sampling on, and are
# taken only for blocking calls (syncs, copies) longer than the threshold: a call under 100 us cannot
# explain a visible gap either.
PYTHON_SAMPLING_HZ = 1000
CUDA_BACKTRACE_THRESHOLD_NS = 100_000
CALLSITE_LEVELS = ("off", "python", "cuda")

LOG_TAIL_LINES = 20

_TOO_OLD = (
    f"this nsys is too old for the flags hybrid passes; install Nsight Systems "
    f"{MIN_NSYS_VERSION[0]}.{MIN_NSYS_VERSION[1]} or newer"
)

# Lines nsys prints when it fails, and what to do about each. Matched case-insensitively.
KNOWN_FAILURES = (
    (
        "libdw.so.1",
        (
            f"install elfutils' libdw (Debian/Ubuntu: `apt-get install libdw1`), or point {NSYS_ENV} "
            "at a full Nsight Systems install rather than the CLI bundled with Nsight Compute"
        ),
    ),
    ("unrecognised option", _TOO_OLD),
    ("unrecognized option", _TOO_OLD),
    ("permission denied", "make the output folder writable and nsys executable by this user"),
    ("no space left", "free disk space in the run directory (an nsys report can take gigabytes)"),
)


@dataclass(frozen=True)
class NsysRun:
    returncode: int
    log: str  # nsys's stdout and stderr, merged
    rep_path: Path
    sqlite_path: Path


def find_nsys() -> Path | None:
    """The nsys CLI to use: $HYBRID_NSYS, then PATH, then the usual install folders (newest first)."""
    return find_tool("nsys", NSYS_ENV, NSYS_GLOBS)


def parse_nsys_version(text: str) -> tuple[int, ...] | None:
    """'NVIDIA Nsight Systems version 2025.3.1.90-253135822842v0' -> (2025, 3, 1, 90)."""
    match = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    if not match:
        return None
    return tuple(int(g) for g in match.groups() if g is not None)


def nsys_version(nsys: Path) -> str:
    """The version of an nsys binary ('2025.3.1.90'); ToolFailed when it does not run."""
    try:
        proc = run_bounded([str(nsys), "--version"], probe_timeout_s())  # a stuck nsys must not hang doctor
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolFailed(
            f"could not run `{nsys} --version`: {exc}",
            f"check that {nsys} is a working Nsight Systems CLI, or set {NSYS_ENV}",
        ) from exc
    output = proc.stdout + proc.stderr
    version = parse_nsys_version(output)
    if proc.returncode != 0 or version is None:
        raise ToolFailed(
            f"`{nsys} --version` failed: {_tail(output)}",
            _fix_for(output) or f"check the Nsight Systems install, or set {NSYS_ENV} to another nsys",
        )
    return ".".join(map(str, version))


def check_nsys_version(version: str) -> None:
    """ToolFailed when `version` (as nsys_version returns it) predates MIN_NSYS_VERSION."""
    parsed = parse_nsys_version(version)
    if parsed is None or parsed[:2] < MIN_NSYS_VERSION:
        need = ".".join(map(str, MIN_NSYS_VERSION))
        raise ToolFailed(
            f"nsys {version} is too old: hybrid needs {need} or newer "
            "(for --cuda-graph-trace and --capture-range-end)",
            f"install a newer Nsight Systems and put it on PATH or in {NSYS_ENV}",
        )


@dataclass(frozen=True)
class CallsiteSampling:
    """The flags that make one nsys pass record Python stacks, as far as the installed nsys has them.
    `missing` names the flags that level wanted and this nsys lacks (said in the run's notes)."""

    level: str  # one of CALLSITE_LEVELS
    flags: tuple[str, ...] = ()
    cpu_sampling: bool = False
    missing: tuple[str, ...] = ()

    @property
    def python_sampling(self) -> bool:
        return any(flag.startswith("--python-sampling=") for flag in self.flags)

    @property
    def separate_export(self) -> bool:
        """The samples' stacks are NVTX payloads (blobs), which `nsys profile --export sqlite` leaves
        out (binaryData NULL, nsys 2025.3): the pass then exports with `nsys export` (export_sqlite)."""
        return self.python_sampling or any(flag.startswith("--python-backtrace=") for flag in self.flags)


def profile_help(nsys: Path) -> str:
    """`nsys profile --help` (the options this nsys accepts); empty when it cannot be run."""
    try:
        proc = run_bounded([str(nsys), "profile", "--help"], probe_timeout_s())
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


def _lists_option(help_text: str, option: str) -> bool:
    return re.search(rf"(^|[\s,]){re.escape(option)}(?![\w-])", help_text, flags=re.MULTILINE) is not None


def callsite_sampling(help_text: str, level: str = "python") -> CallsiteSampling:
    """The callsite flags of `level` that `help_text` (profile_help) lists; a flag the help does not
    list is left out and named in `missing`, so an older nsys still runs, only without callsites."""
    if level not in CALLSITE_LEVELS:
        raise ValueError(f"unknown callsite level {level!r}")
    if level == "off":
        return CallsiteSampling(level)
    flags: list[str] = []
    missing: list[str] = []

    def want(option: str, value: str) -> bool:
        if _lists_option(help_text, option):
            flags.append(f"{option}={value}")
            return True
        missing.append(option)
        return False

    if want("--python-sampling", "true") and _lists_option(help_text, "--python-sampling-frequency"):
        flags.append(f"--python-sampling-frequency={PYTHON_SAMPLING_HZ}")
    cpu_sampling = False
    if level == "cuda" and want("--python-backtrace", "cuda"):
        cpu_sampling = True
        want("--cudabacktrace", f"sync:{CUDA_BACKTRACE_THRESHOLD_NS},memory:{CUDA_BACKTRACE_THRESHOLD_NS}")
    return CallsiteSampling(level, tuple(flags), cpu_sampling, tuple(missing))


def build_nsys_command(
    nsys: Path,
    out_base: Path,
    target_argv: list[str],
    *,
    capture_range: bool,
    sampling: CallsiteSampling | None = None,
) -> list[str]:
    """The argv of one nsys pass. `out_base` has no extension: nsys adds .nsys-rep and .sqlite.

    With `capture_range`, only what lies between the injector's cudaProfilerStart (end of warmup) and
    cudaProfilerStop (after the last measured step) is recorded, and nsys stops there. `sampling`
    adds the Python-stack flags (callsite_sampling).
    """
    cpu_sampling = sampling is not None and sampling.cpu_sampling
    argv = [
        str(nsys),
        "profile",
        "-t",
        TRACE,
        # CPU IP sampling costs overhead; only the Python backtraces of CUDA calls need it.
        "-s",
        "process-tree" if cpu_sampling else "none",
        "--cpuctxsw=none",
        # Without this, a CUDA graph replay is one opaque row and its kernels are invisible.
        "--cuda-graph-trace=node",
        "--export",
        "none" if sampling is not None and sampling.separate_export else "sqlite",
        "-o",
        str(out_base),
        "--force-overwrite",
        "true",
    ]
    if capture_range:
        argv += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    if sampling is not None:
        argv += list(sampling.flags)
    return argv + list(target_argv)


def export_command(nsys: Path, out_base: Path, *, include_blobs: bool) -> list[str]:
    """`nsys export` of out_base.nsys-rep to out_base.sqlite; `include_blobs` keeps NVTX payloads."""
    return [
        str(nsys),
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        *(["--include-blobs=true"] if include_blobs else []),
        "-o",
        f"{out_base}.sqlite",
        f"{out_base}.nsys-rep",
    ]


# A stuck `nsys export` must not hold `hybrid run` forever; a 1 GB report exports in minutes, not 30.
EXPORT_TIMEOUT_S = 1800


def export_sqlite(
    nsys: Path, out_base: Path, *, log_path: Path | None = None, timeout_s: float | None = None
) -> str:
    """Export the pass's report with its NVTX payloads (the Python samples); when this nsys cannot
    (no --include-blobs), export without them: the analysis then says the samples are missing.
    Returns the exports' output; a report that cannot be exported at all is left to check_export."""
    logs = []
    for include_blobs in (True, False):
        argv = export_command(nsys, out_base, include_blobs=include_blobs)
        try:
            proc = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                timeout=timeout_s or EXPORT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            logs.append(f"$ {' '.join(argv)}\n{exc}\n")
            continue
        logs.append(f"$ {' '.join(argv)}\n{proc.stdout}")
        if proc.returncode == 0 and Path(f"{out_base}.sqlite").is_file():
            break
    log = "".join(logs)
    if log_path is not None:
        log_path.write_text(log)
    return log


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:]) if kept else "(no output)"


def _fix_for(log: str) -> str | None:
    lowered = log.lower()
    for needle, fix in KNOWN_FAILURES:
        if needle in lowered:
            return fix
    return None


def check_export(out_base: Path, returncode: int, log: str, log_path: Path | None = None) -> Path:
    """The .sqlite an nsys pass wrote to `out_base`; ToolFailed quoting the end of nsys's output
    (and the fix for failures we recognize) when there is none."""
    sqlite_path = Path(f"{out_base}.sqlite")
    if not sqlite_path.is_file():
        raise ToolFailed(
            f"nsys exited with status {returncode} and wrote no {sqlite_path.name}; its output ends:\n"
            f"{_tail(log)}",
            _fix_for(log) or "read the nsys log above; rerun the same command by hand to reproduce it",
            kept=str(log_path) if log_path is not None else None,
        )
    return sqlite_path


def run_nsys(
    nsys: Path,
    out_base: Path,
    target_argv: list[str],
    *,
    capture_range: bool,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
    timeout_s: float | None = None,
) -> NsysRun:
    """Check the nsys version, run one pass and check it produced `out_base`.sqlite.

    The workload's own exit status is returned, not judged: the caller tells a failed workload
    (WorkloadError) from a failed profiler. A missing export is always a profiler failure.
    """
    check_nsys_version(nsys_version(nsys))
    out_base = Path(out_base)
    out_base.parent.mkdir(parents=True, exist_ok=True)
    argv = build_nsys_command(nsys, out_base, target_argv, capture_range=capture_range)
    try:
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        if log_path is not None:
            Path(log_path).write_text(partial)
        raise ToolFailed(
            f"nsys did not finish within {timeout_s:.0f} s",
            "measure fewer steps or raise the pass timeout",
            kept=str(log_path) if log_path is not None else None,
        ) from exc
    if log_path is not None:
        Path(log_path).write_text(proc.stdout)
    sqlite_path = check_export(out_base, proc.returncode, proc.stdout, log_path)
    return NsysRun(proc.returncode, proc.stdout, Path(f"{out_base}.nsys-rep"), sqlite_path)
