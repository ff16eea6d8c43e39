"""Find the Nsight Compute CLI, build its command line, run it, and check what it left.

Torch-free and pandas-free: the orchestrator imports this before deciding which passes to run.

Output layout: the profiling run writes an Nsight Compute report (`--export report.ncu-rep`, which
users can open in the Nsight Compute GUI) and prints, beside the workload's own output, one
`==PROF== Profiling "kernel" - N: ...` line per replayed launch: that line is the pass's live
progress, which ncu suppresses in `--csv` mode. A second, short ncu call (`--import`) turns the
report into the counters CSV (`export_counters`), so program output never lands inside the table.
`check_run` copies ncu's message lines into ncu.log for people to read; the CSV reader skips them.

CSV layout: `--page raw` (one row per kernel, one column per metric, a units row), not the default
long details page (one row per kernel and metric): a kernel name full of commas is one cell per
kernel instead of one per metric, a metric ncu did not collect is an absent column rather than
absent rows, and the raw page also carries `profiler__replayer_passes`, which says how many replay
passes each kernel cost. nsight/ncu_csv.py reads both layouts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsight.errors import ToolFailed
from nsight.locate import find_tool
from nsight.ncu_metrics import METRICS
from nsight.tool_probe import probe_timeout_s, run_bounded

NCU_ENV = "HYBRID_NCU"

# Searched after $HYBRID_NCU and PATH; within one pattern the newest version wins.
NCU_GLOBS = ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/bin/ncu")

# The injector's step ranges (push/pop, NVTX domain "hybrid"). ncu's NVTX filter syntax is
# "<domain>@<range>" and a push/pop range is written with a trailing "/" (without it ncu looks for a
# start/end range of that name and matches nothing). A push/pop range lives on the thread that pushed
# it, and so does ncu's filter: on the H200 (resnet50 b32, per-launch-config) `hybrid@step 0/` admitted
# only the Python thread's launches (255 of the step's 650); the 395 that PyTorch's autograd thread
# launched for the backward pass were never profiled, and counters covered 29% of the step's GPU time.
# The injector's measured window is therefore taken from cudaProfilerStart/Stop, which hold for every
# thread of the process.
NVTX_DOMAIN = "hybrid"

# NCCL kernels wait for peers; replayed alone under ncu they hang the job. Always excluded.
NCCL_PREFIX = "nccl"

# ncu replays each profiled launch once per pass, saving and restoring the memory it writes, which
# costs milliseconds per launch. A step of a large model can hold thousands of launches of the
# selected kernels; this cap keeps the pass to minutes. Launches past it get counters from an
# earlier profiled launch of the same kernel and launch configuration (the caller matches them back:
# hybrid.load.ncu_match).
DEFAULT_MAX_LAUNCHES = 500

# What one replayed launch costs the ncu pass at hybrid's 32 metrics (15 replay passes): 0.434 s on resnet50
# b32 and 0.444 s on a Transformer, on the H200, beside a fixed ~11-12 s a pass
# (benchmarks/results/ncu_cost.md).
SECONDS_PER_LAUNCH = 0.434
# The replay time hybrid's `--mode auto` gives ncu unless --ncu-budget-s says otherwise: about 11 launches, an
# ncu pass of about 16 s. Re-deciding the committed captures whose plan runs ncu on more launches, counters on
# only the budget's kernels gave every primary and severity all their counters gave at 5 s, and not at 3.5 s
# (healthy_pipelined_input's primary changed); one saving moved, 1.66 -> 1.03 ms (benchmarks/results/
# ncu_budget.md, `python benchmarks/cost_bench.py budget`).
DEFAULT_BUDGET_S = 5.0


LOG_TAIL_LINES = 20

REPORT_NAME = "report.ncu-rep"
# Reading a report back as CSV takes seconds; five minutes means it is stuck.
IMPORT_TIMEOUT_S = 300

# ncu's own output lines start with "==PROF==", "==WARNING==", "==ERROR==".
_MESSAGE_LINE = re.compile(r"^==[A-Z]+==")
# Printed once per profiled launch: `==PROF== Profiling "name" - 3: 0%....50%....100% - 9 passes`
# (older releases leave out the " - 3" launch number; long names end in "...").
_PROFILING_LINE = re.compile(r'^==PROF== Profiling "(?P<kernel>[^"]*)"(?: - \d+)?:')

# What ncu prints when the user may not read GPU performance counters.
PERMISSION_MARKERS = (
    "ERR_NVGPUCTRPERM",
    "does not have permission to access NVIDIA GPU Performance Counters",
    "does not have permission to profile",
)
PERMISSION_FIX = (
    "GPU performance counters are restricted to administrators on this machine. Either run hybrid as "
    "root (sudo -E), or allow all users: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
    "/etc/modprobe.d/nvidia-profiling.conf and reload the driver (or reboot); in a container, start it "
    "with `--cap-add SYS_ADMIN`. See https://developer.nvidia.com/ERR_NVGPUCTRPERM. "
    "Or skip counters with --mode nsys."
)


# How the pass's files (ncu.log, counters.csv) are written: a plain write by default; a caller with its
# own file policy (hybrid: atomic, never over a user's file) passes its writer.
Write = Callable[[Path, str], object]


def write_text(path: Path, text: str) -> None:
    Path(path).write_text(text, encoding="utf-8")


@dataclass(frozen=True)
class NcuRun:
    returncode: int
    csv_path: Path
    log_path: Path
    partial: bool  # ncu exited non-zero but left a table: the kernels profiled before it stopped


def find_ncu() -> Path | None:
    """The ncu CLI to use: $HYBRID_NCU (binary or install folder), PATH, then the usual install
    folders (newest first)."""
    return find_tool("ncu", NCU_ENV, NCU_GLOBS)


def parse_ncu_version(text: str) -> str | None:
    """'Version 2025.3.1.0 (build 36398880) (public-release)' -> '2025.3.1.0'."""
    match = re.search(r"Version\s+(\d{4}\.\d+(?:\.\d+)*)", text)
    return match.group(1) if match else None


def ncu_version(ncu: Path) -> str | None:
    """The version ncu reports, or None when it does not run or says something unexpected (the
    pass then fails with ncu's own message; the version is informational)."""
    try:
        proc = run_bounded([str(ncu), "--version"], probe_timeout_s())  # a stuck ncu must not hang doctor
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_ncu_version(proc.stdout + proc.stderr)


def function_base_name(demangled: str) -> str:
    """The function name ncu matches with `--kernel-name-base function`: no return type, no
    namespaces, no template arguments, no parameters.

    'void at::native::<unnamed>::reduce_kernel<(int)512, ...>(T3)' -> 'reduce_kernel'. nsys and ncu
    demangle differently ('at::native::...<(int)4, ...>' vs 'at::...<4, ...>'), so this base name is
    what the two tools agree on.
    """
    name = demangled.replace("(anonymous namespace)", "").replace("<unnamed>", "")
    depth = 0
    kept: list[str] = []
    for char in name:
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            if char == "(":
                break  # the parameter list
            kept.append(char)
    head = "".join(kept).strip()
    last = head.split("::")[-1].strip()
    return last.split()[-1] if last.split() else demangled.strip()


# Template arguments cast to their type, "(int)4", "(bool)1", "(cudnnKernelDataType_t)0": nsys prints
# the cast, ncu only the value.
_VALUE_CAST = re.compile(r"\([A-Za-z_][\w: ]*\)(?=-?\d)")
# Identifiers (with a trailing "::" when they qualify the next one) and numbers.
_NAME_TOKEN = re.compile(r"[A-Za-z_]\w*(?:\s*::)?|\d+")
# Words one tool prints and the other drops: "const" of lambda call operators, anonymous namespaces.
_UNSHARED_WORDS = frozenset({"const", "unnamed", "anonymous", "namespace"})


def kernel_signature(demangled: str) -> str:
    """The demangled name reduced to what nsys and ncu both print: identifiers and numbers in order,
    without namespace qualifiers, value casts and the words only one tool writes.

    Unlike function_base_name it keeps the template arguments, so two instantiations of one template
    ('vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, ...>' and '<4, FillFunctor<float>, ...>')
    stay apart even when launched with the same grid and block. On the H200 captures (21 run
    directories, 110 distinct ncu kernel names) every ncu name had exactly one nsys name of the same
    signature.
    """
    tokens = _NAME_TOKEN.findall(_VALUE_CAST.sub("", demangled))
    return " ".join(t for t in tokens if not t.endswith("::") and t not in _UNSHARED_WORDS)


def _ecma_escape(text: str) -> str:
    """Escape for ncu's regex (ECMAScript syntax): only the metacharacters, so the pattern stays
    readable in command.txt."""
    return re.sub(r"([\\^$.*+?()\[\]{}|/])", r"\\\1", text)


def kernel_name_filter(kernel_names: Sequence[str]) -> str:
    """The `--kernel-name` value: an anchored alternation of the selected kernels' function base
    names, with NCCL kernels excluded; with no names, every kernel but NCCL's."""
    bases = sorted({function_base_name(name) for name in kernel_names})
    guard = f"^(?!{NCCL_PREFIX})"
    if not bases:
        # ncu applies the regex to the whole name, so the guard alone would match only "".
        return f"regex:{guard}.*"
    return f"regex:{guard}(?:{'|'.join(_ecma_escape(b) for b in bases)})$"


def build_ncu_command(
    ncu: Path,
    report_path: Path,
    target_argv: Sequence[str],
    *,
    kernel_names: Sequence[str],
    measured_window: bool = False,
    nvtx_step: int | None = None,
    launch_count: int | None = DEFAULT_MAX_LAUNCHES,
    metrics: Sequence[str] = METRICS,
    one_per_config: bool = False,
) -> list[str]:
    """The argv of the ncu pass: the given metrics for the selected kernels, saved to `report_path`
    (an .ncu-rep), launched

    - with `measured_window`, between the injector's cudaProfilerStart (end of warmup) and
      cudaProfilerStop (after the last measured step), from any thread: what the ncu pass under the
      injector uses (run it with one measured step to profile exactly one);
    - with `nvtx_step`, inside the push/pop range "step N" of NVTX domain "hybrid" on the launching
      thread only, for scripts that mark their steps themselves and launch from one thread;
    - with neither, anywhere in the run.

    Kernels are matched on their function base name (`--kernel-name-base function`): exact,
    immune to the two tools demangling templates differently, and free of the regex escaping of
    C++ names full of `()<>*&,`. It matches every instantiation of a template, which is why
    attach_counters matches back by name and launch configuration.
    """
    argv = [
        str(ncu),
        "--export",
        str(report_path),
        "--force-overwrite",
        # ncu otherwise locks clocks to base, and durations stop being comparable with nsys.
        "--clock-control",
        "none",
        # Flush caches before each replay pass so every pass sees the same (cold) memory state;
        # this is ncu's default, stated so the DRAM bytes' meaning is visible in command.txt.
        "--cache-control",
        "all",
        "--target-processes",
        "all",
        "--metrics",
        ",".join(metrics),
        "--kernel-name-base",
        "function",
        "--kernel-name",
        kernel_name_filter(kernel_names),
    ]
    if measured_window and nvtx_step is not None:
        raise ValueError(
            "measured_window and nvtx_step are exclusive: the NVTX filter would drop the "
            "window's launches from other threads"
        )
    if measured_window:
        argv += ["--profile-from-start", "off"]
    elif nvtx_step is not None:
        argv += ["--nvtx", "--nvtx-include", f"{NVTX_DOMAIN}@step {nvtx_step}/"]
    if one_per_config:
        # Each distinct (kernel, launch configuration) once; every other launch shares the counters
        # of its configuration's profiled launch. The kernel here is the --kernel-name-base function
        # name, so two instantiations of one template launched alike get one profiled launch between
        # them (seen on the H200: the residual add<float> was never profiled, the clamp of the same
        # grid was); attach_counters gives the other one no counters rather than borrowed ones.
        argv += ["--filter-mode", "per-launch-config", "--launch-count", "1"]
    elif launch_count is not None:
        argv += ["--launch-count", str(launch_count)]
    return argv + list(target_argv)


def check_counter_permission(output: str) -> ToolFailed | None:
    """A ToolFailed naming the fixes when ncu's output says counters are not accessible."""
    for marker in PERMISSION_MARKERS:
        if marker in output:
            line = next((ln.strip() for ln in output.splitlines() if marker in ln), marker)
            return ToolFailed(f"ncu may not read GPU performance counters: {line}", PERMISSION_FIX)
    return None


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:]) if kept else "(no output)"


def _has_table(text: str) -> bool:
    return any(line.startswith('"ID","Process ID"') for line in text.splitlines())


def build_import_command(ncu: Path, report_path: Path) -> list[str]:
    """Read a saved report back as the raw CSV page: one row per launch, base units."""
    return [str(ncu), "--import", str(report_path), "--csv", "--page", "raw", "--print-units", "base"]


def profiled_kernel(line: str) -> str | None:
    """The kernel of ncu's once-per-replayed-launch line, None for any other line."""
    match = _PROFILING_LINE.match(line)
    return match["kernel"] if match else None


def check_run(
    csv_path: Path, log_path: Path, returncode: int, console: str = "", *, write: Write = write_text
) -> bool:
    """Check an ncu pass after it ran: write ncu's message lines from the CSV and `console` (the
    run's stdout/stderr) into `log_path`; raise ToolFailed, keeping what exists, when counters
    were not permitted or no table was written. Returns True when the table is partial (ncu exited
    non-zero after profiling some kernels); the CSV is never rewritten.
    """
    csv_path, log_path = Path(csv_path), Path(log_path)
    text = csv_path.read_text(encoding="utf-8", errors="replace") if csv_path.is_file() else ""
    messages = "\n".join(line for line in text.splitlines() if _MESSAGE_LINE.match(line))
    log = messages + "\n" if messages else ""
    if console:
        log += f"--- workload and ncu console output ---\n{console}"
    write(log_path, log)
    output = f"{console}\n{messages}"
    denied = check_counter_permission(output)
    if denied is not None:
        denied.kept = f"{csv_path} and {log_path}"
        raise denied
    if not _has_table(text):
        raise ToolFailed(
            f"ncu exited with status {returncode} and wrote no counter table; its output ends:\n"
            f"{_tail(output)}",
            "read ncu.log and the pass's console log; a filter that matched no kernel prints "
            "'No kernels were profiled'",
            kept=f"{csv_path} and {log_path}",
        )
    return returncode != 0


def export_counters(ncu: Path, report_path: Path, csv_path: Path, *, write: Write = write_text) -> str:
    """Write the report's counters to `csv_path`; returns what the import printed on stderr (empty
    when fine). A missing report leaves no CSV, and check_run then says why from ncu's output."""
    report_path, csv_path = Path(report_path), Path(csv_path)
    if not report_path.is_file():
        return f"ncu wrote no report ({report_path.name})"
    try:
        proc = run_bounded(build_import_command(ncu, report_path), IMPORT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"reading {report_path.name} back failed: {exc}"
    write(csv_path, proc.stdout)
    return proc.stderr.strip() if proc.returncode != 0 or not _has_table(proc.stdout) else ""


def finish_pass(
    ncu: Path,
    report_path: Path,
    csv_path: Path,
    log_path: Path,
    returncode: int,
    console: str,
    *,
    write: Write = write_text,
) -> bool:
    """After the profiling run: the report as CSV, then check_run (raises ToolFailed; returns
    whether the table is partial)."""
    import_error = export_counters(ncu, report_path, csv_path, write=write)
    if import_error:
        console = f"{console}\n==ERROR== {import_error}\n"
    return check_run(csv_path, log_path, returncode, console, write=write)


def run_ncu(
    ncu: Path,
    csv_path: Path,
    log_path: Path,
    target_argv: Sequence[str],
    *,
    kernel_names: Sequence[str],
    measured_window: bool = False,
    nvtx_step: int | None = None,
    launch_count: int | None = DEFAULT_MAX_LAUNCHES,
    metrics: Sequence[str] = METRICS,
    one_per_config: bool = False,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> NcuRun:
    """Run one ncu pass outside the orchestrator (benchmarks, tests): the report goes beside
    `csv_path` (same name, .ncu-rep). Whatever ncu saved is kept when it or the workload stops
    early; `log_path` gets ncu's messages and the console output."""
    csv_path, log_path = Path(csv_path), Path(log_path)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    report_path = csv_path.with_suffix(".ncu-rep")
    argv = build_ncu_command(
        ncu,
        report_path,
        target_argv,
        kernel_names=kernel_names,
        measured_window=measured_window,
        nvtx_step=nvtx_step,
        launch_count=launch_count,
        metrics=metrics,
        one_per_config=one_per_config,
    )
    # Own process group: a timeout must stop ncu and the workload it launched, not only ncu.
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,
    )
    try:
        console, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        console, _ = proc.communicate()
        write_text(log_path, console)
        raise ToolFailed(
            f"ncu did not finish within {timeout_s:.0f} s",
            "select fewer kernels or launches (coverage, cap), or raise the timeout",
            kept=f"{report_path} and {log_path}",
        ) from exc
    partial = finish_pass(ncu, report_path, csv_path, log_path, proc.returncode, console)
    return NcuRun(proc.returncode, csv_path, log_path, partial)
