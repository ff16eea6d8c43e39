"""The command line. Commands only parse options and call into the package; a HybridError becomes
its exit code here and nowhere else (docs/DESIGN.md: 0 done, 1 finding at/above --fail-on or a regression
past --fail-on-regression, 2 usage or unreadable input, 3 workload failed, 4 profiler failed, 5 the
regression gate cannot decide, 70 an internal error, 130 interrupted, 128 + N stopped by SIGTERM or
SIGHUP)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path

import typer

from hybrid.errors import (
    EXIT_FINDING_AT_OR_ABOVE,
    EXIT_GATE_UNDECIDED,
    EXIT_INTERNAL_ERROR,
    EXIT_INTERRUPTED,
    HybridError,
    Terminated,
    UsageError,
)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
    help="Diagnose why a PyTorch training or inference step is slow on the GPU.",
)


class Mode(str, Enum):
    auto = "auto"
    hybrid = "hybrid"
    nsys = "nsys"
    torch = "torch"


class Severity(str, Enum):
    CRITICAL = "CRITICAL"
    SEVERE = "SEVERE"
    MODERATE = "MODERATE"
    LOW = "LOW"


class Precision(str, Enum):
    default = "default"
    fp32 = "fp32"
    tf32 = "tf32"
    bf16_amp = "bf16-amp"
    fp16_amp = "fp16-amp"


def _version(show: bool) -> None:
    if show:
        from hybrid import __version__

        print(f"hybrid {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Diagnose why a PyTorch training or inference step is slow on the GPU."""


def _stderr(text: str) -> None:
    """A message on stderr, each line's control characters escaped: paths and names in it come from the
    user's files and from received ones (a folder named with ESC sequences must not act on the terminal)."""
    from hybrid.report.safe_text import escape_controls

    # stderr closed or full: nothing left to tell the user through
    with contextlib.suppress(OSError, ValueError):
        print("\n".join(escape_controls(line) for line in text.split("\n")), file=sys.stderr, flush=True)


def handles_errors(command: Callable) -> Callable:
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from hybrid.collect.signals import install_stop_handlers

        install_stop_handlers()
        try:
            return command(*args, **kwargs)
        except HybridError as error:
            _stderr(error.message())
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            _stderr(
                "interrupted: stopped the workload; what was gathered so far is kept in the run directory"
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Terminated as stop:
            _stderr(f"terminated: {stop}; nothing already written was lost")
            raise typer.Exit(stop.exit_code) from None
        except typer.Exit:
            raise
        except Exception:  # noqa: BLE001 - a defect in hybrid: its own exit code, never --fail-on's 1
            import traceback

            _stderr(traceback.format_exc().rstrip())
            _stderr(
                "internal error: hybrid failed on this input (a defect, not your mistake); please report "
                "it with the traceback above and, if you can, the file it read"
            )
            raise typer.Exit(EXIT_INTERNAL_ERROR) from None
        finally:
            _say_kept()

    return wrapper


def _default_out(stem: str) -> Path:
    return Path("hybrid-runs") / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def _save_reports(
    results: dict, run_dir: Path, written: list[str], *, html: bool, include_paths: bool
) -> None:
    """results.json, report.txt (and report.html) in the run directory, each name added to `written`
    once saved; what a previous analysis left there is kept as results.N.json (report.N.txt, ...) by
    hybrid.files. Raises OutputError."""
    from hybrid.files import write_file
    from hybrid.report.json_report import write_results
    from hybrid.report.terminal import render_terminal

    write_results(results, run_dir / "results.json")
    written.append("results.json")
    write_file(run_dir / "report.txt", render_terminal(results, verbose=True, color=False))
    written.append("report.txt")
    if html:
        from hybrid.report.html_report import render_html

        write_file(run_dir / "report.html", render_html(results, include_paths=include_paths))
        written.append("report.html")


def _emit(
    results: dict,
    *,
    run_dir: Path | None,
    as_json: bool,
    html: bool,
    verbose: bool,
    include_paths: bool,
    fail_on: Severity | None,
    location: Path | None = None,
) -> None:
    """Write results.json (and report.txt / report.html) into the run directory, print the report,
    and exit 1 when a finding reaches --fail-on. A run directory that cannot be written (read-only,
    full) still gets its report printed, with a warning that it was not saved."""
    from hybrid.errors import OutputError
    from hybrid.report.json_report import results_to_json
    from hybrid.report.terminal import print_report
    from hybrid.streams import json_text

    written: list[str] = []
    if run_dir is not None:
        try:
            _save_reports(results, run_dir, written, html=html, include_paths=include_paths)
        except OutputError as error:
            saved = f"only {', '.join(written)} saved" if written else "nothing saved"
            _stderr(f"warning: {saved} in {run_dir} ({error.cause}); the report is on stdout only")
    if as_json:
        sys.stdout.write(json_text(results_to_json(results)) + "\n")
    else:
        from rich.console import Console

        print_report(
            results,
            Console(no_color=bool(os.environ.get("NO_COLOR")) or None),
            verbose=verbose,
            location=str(location or run_dir) if (location or run_dir) is not None else None,
        )
        if "results.json" in written:
            shown = ", ".join(name for name in written if name in ("results.json", "report.html"))
            _stderr(f"run directory: {run_dir}  ({shown})")
    _fail_on(results, fail_on)


def _say_kept() -> None:
    """Name the files hybrid found where its outputs go and kept as numbered copies before replacing them."""
    from hybrid.files import kept_copies

    kept = kept_copies()
    if kept:
        _stderr("earlier files kept: " + ", ".join(f"{old.name} as {copy.name}" for old, copy in kept))


def _fail_on(results: dict, fail_on: Severity | None) -> None:
    """Exit 1 when a measured finding reaches --fail-on, naming each finding that does on stderr."""
    if fail_on is None:
        return
    from hybrid.report.safe_text import escape_strings
    from hybrid.report.units import format_value
    from hybrid.rules.base import SEVERITY_RANK

    threshold = SEVERITY_RANK[fail_on.value]
    findings = (results.get("diagnosis") or {}).get("bottlenecks") or []
    # A received document's figures decide this gate too: a severity it does not know ("critical") would let
    # a finding pass unseen (a not_measured of another type is dropped on load: the finding counts).
    unreadable = [f for f in findings if f.get("severity") not in SEVERITY_RANK]
    if unreadable:
        shown = "; ".join(
            f"{f.get('id')}: severity {f.get('severity')!r}" for f in escape_strings(unreadable[:3])
        )
        raise UsageError(
            f"--fail-on cannot weigh {len(unreadable)} finding(s) of this document ({shown})",
            f"severities are {', '.join(SEVERITY_RANK)}; re-create the results.json with "
            "`hybrid report RUN_DIR`",
        )
    tripped = [f for f in findings if SEVERITY_RANK[f["severity"]] >= threshold and not f.get("not_measured")]
    if tripped:
        for finding in escape_strings(tripped):
            _stderr(
                f"--fail-on {fail_on.value}: [{finding.get('severity')}] {finding.get('id')}: "
                f"{finding.get('title')} ({format_value(finding.get('time_lost_ms'), 'ms')}/step est.)"
            )
        raise typer.Exit(EXIT_FINDING_AT_OR_ABOVE)


def _profile_and_report(
    target,
    options,
    *,
    as_json: bool,
    html: bool,
    verbose: bool,
    quiet: bool,
    include_paths: bool,
    fail_on: Severity | None,
    model: str | None = None,
) -> None:
    from hybrid.collect.orchestrate import Orchestrator
    from hybrid.collect.progress import progress_view

    orchestrator = Orchestrator(target, options)
    if model:
        orchestrator.run_dir.update_run_json(model=model)
    with progress_view(quiet=quiet or as_json) as progress:
        orchestrator.progress = progress
        try:
            orchestrator.run()
        except KeyboardInterrupt:
            _stderr(f"interrupted: partial run kept in {orchestrator.run_dir.path}")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Terminated as stop:
            _stderr(
                f"terminated: {stop}: the workload's process group was sent {stop.name} and stopped; "
                f"partial run kept in {orchestrator.run_dir.path}"
            )
            raise typer.Exit(stop.exit_code) from None
    results = orchestrator.results()
    _emit(
        results,
        run_dir=orchestrator.run_dir.path,
        as_json=as_json,
        html=html,
        verbose=verbose,
        include_paths=include_paths,
        fail_on=fail_on,
    )


def _torchrun_argv(argv: list[str]) -> list[str] | None:
    """`hybrid run -- torchrun [flags] train.py ...` or `... python -m torch.distributed.run ...`:
    the launcher's own arguments (after its name), else None."""
    if Path(argv[0]).name == "torchrun":
        return argv[1:]
    if (
        len(argv) > 2
        and Path(argv[0]).name.startswith("python")
        and argv[1:3] == ["-m", "torch.distributed.run"]
    ):
        return argv[3:]
    return None


def _profile_job(
    argv: list[str],
    launcher: list[str] | None,
    nproc: int | None,
    options,
    *,
    rank: int | None,
    as_json: bool,
    html: bool,
    verbose: bool,
    quiet: bool,
    include_paths: bool,
    fail_on: Severity | None,
) -> None:
    from hybrid.collect.progress import progress_view
    from hybrid.collect.torchrun import run_job
    from hybrid.pipeline import analyze_job, analyze_run_dir, rank_path

    with progress_view(quiet=quiet or as_json) as progress:
        run_dir = run_job(None if launcher is not None else argv, options, nproc, launcher, progress)
    results = analyze_run_dir(rank_path(run_dir, rank)) if rank is not None else analyze_job(run_dir)
    _emit(
        results,
        run_dir=run_dir if rank is None else rank_path(run_dir, rank),
        as_json=as_json,
        html=html,
        verbose=verbose,
        include_paths=include_paths,
        fail_on=fail_on,
    )


# Options shared by `run` and `diagnose`.
ModeOpt = typer.Option(
    Mode.auto,
    "--mode",
    help="auto: every collector available; hybrid: torch+nsys+ncu "
    "(fail if one is missing); nsys: torch+nsys; torch: torch.profiler only",
)
OutOpt = typer.Option(None, "--out", "-o", help="run directory (default hybrid-runs/NAME-TIME)")
JsonOpt = typer.Option(False, "--json", help="print results.json to stdout instead of the report")
HtmlOpt = typer.Option(False, "--html", help="also write report.html into the run directory")
VerboseOpt = typer.Option(False, "--verbose", "-v", help="add top-kernel and per-layer tables, all findings")
QuietOpt = typer.Option(False, "--quiet", "-q", help="no progress display")
FailOnOpt = typer.Option(None, "--fail-on", help="exit 1 when a finding at or above this severity exists")
PathsOpt = typer.Option(False, "--include-paths", help="keep absolute paths in report.html")
BaselineOpt = typer.Option(
    False, "--baseline", help="add a plain pass with no collector, the reference for profiler overhead"
)
VerifyOpt = typer.Option(
    0,
    "--verify",
    metavar="N",
    help="after the diagnosis, re-run the plain steps with the fix of each of the top N findings that hybrid "
    "can switch on itself (TF32, autocast, torch.compile, DataLoader workers, ...): the realized saving "
    "beside the predicted one, one run of the script per fix (e.g. --verify 3)",
)
NcuKernelsOpt = typer.Option(12, "--ncu-kernels", help="at most this many kernel names replayed by ncu")
CalibrateOpt = typer.Option(
    True,
    "--calibrate/--no-calibrate",
    help="after the passes, time the run's GEMM/conv shapes on its GPU (about 5 s, no collector) so that "
    "TF32, bf16 and padded-shape savings are measured, not datasheet ratios",
)
CallsitesOpt = typer.Option(
    "python",
    "--callsites",
    help="what the nsys pass records to point findings at "
    "the script's lines: off, python (Python sampling) or cuda (also Python "
    "backtraces of blocking CUDA calls, with CPU sampling)",
)
TorchStacksOpt = typer.Option(
    False,
    "--torch-stacks/--no-torch-stacks",
    help="the torch pass also records "
    "operators' Python stacks (with_stack), to place .item(), .cpu() and tensor "
    "creation on their lines; slows Python-heavy steps",
)
RankOpt = typer.Option(
    None, "--rank", help="multi-process runs: show this rank's full report instead of the job's"
)
# Off by default in both commands: each module call then costs a Python hook and two NVTX calls on the
# host, which the nsys pass measures as part of the program.
NvtxModulesOpt = typer.Option(
    False,
    "--nvtx-modules/--no-nvtx-modules",
    help="an NVTX range per module forward call: the per-layer table and layer roofline "
    "points (adds host time per module call to the nsys pass)",
)


@app.command(context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})
@handles_errors
def run(
    script: str = typer.Argument(..., help="the training/inference script (run as __main__)"),
    args: list[str] | None = typer.Argument(None, help="arguments passed to the script unchanged"),
    steps: int = typer.Option(20, "--steps", help="measured steps"),
    warmup: int = typer.Option(5, "--warmup", help="steps run before measuring (excluded)"),
    mode: Mode = ModeOpt,
    out: Path | None = OutOpt,
    nvtx_modules: bool = NvtxModulesOpt,
    baseline: bool = BaselineOpt,
    verify: int = VerifyOpt,
    ncu_kernels: int = NcuKernelsOpt,
    calibrate: bool = CalibrateOpt,
    callsites: str = CallsitesOpt,
    torch_stacks: bool = TorchStacksOpt,
    whole_run: bool = typer.Option(
        False,
        "--whole-run",
        help="profile the whole script as one range (start-up included) instead of finding its steps",
    ),
    nproc_per_node: int | None = typer.Option(
        None, "--nproc-per-node", help="launch the script on N processes with torchrun and profile every rank"
    ),
    rank: int | None = RankOpt,
    as_json: bool = JsonOpt,
    html: bool = HtmlOpt,
    verbose: bool = VerboseOpt,
    quiet: bool = QuietOpt,
    include_paths: bool = PathsOpt,
    fail_on: Severity | None = FailOnOpt,
) -> None:
    """Profile a script: `hybrid run train.py --lr 0.1`. Steps are found without edits: marks, the optimizer
    step, repeated top-level module calls, or the script's own loop (start-up is never a step).
    Multi-process jobs: `hybrid run --nproc-per-node 2 train.py`, or `hybrid run -- torchrun ... train.py`."""
    from hybrid.collect.orchestrate import RunOptions, Target

    argv = [script, *(args or [])]
    launcher = _torchrun_argv(argv)
    stem = Path(launcher[-1] if launcher else script).stem
    options = RunOptions(
        out_dir=out or _default_out(stem),
        unique_out_dir=out is None,
        mode=mode.value,
        warmup=warmup,
        steps=steps,
        nvtx_modules=nvtx_modules,
        baseline=baseline,
        verify=verify,
        ncu_kernels=ncu_kernels,
        calibrate=calibrate,
        callsites=callsites,
        torch_stacks=torch_stacks,
        whole_run=whole_run,
    )
    if verify and (launcher is not None or nproc_per_node is not None):
        raise UsageError(
            "--verify runs single-process scripts only: a torchrun job's fixes are not switched yet",
            "profile the job without --verify, or one process of it with --verify",
        )
    if launcher is not None or nproc_per_node is not None:
        _profile_job(
            argv,
            launcher,
            nproc_per_node,
            options,
            rank=rank,
            as_json=as_json,
            html=html,
            verbose=verbose,
            quiet=quiet,
            include_paths=include_paths,
            fail_on=fail_on,
        )
        return
    _profile_and_report(
        Target(argv=argv),
        options,
        as_json=as_json,
        html=html,
        verbose=verbose,
        quiet=quiet,
        include_paths=include_paths,
        fail_on=fail_on,
    )


@app.command()
@handles_errors
def diagnose(
    model: str = typer.Option(..., "--model", "-m", help="resnet50, transformer or simple_cnn"),
    batch_size: int | None = typer.Option(
        None, "--batch-size", "-b", help="samples per step (default: the model's own; smaller on the CPU)"
    ),
    steps: int | None = typer.Option(None, "--steps", help="measured steps (default 20; fewer on the CPU)"),
    warmup: int | None = typer.Option(None, "--warmup", help="steps run before measuring (default 5)"),
    precision: Precision = typer.Option(
        Precision.default,
        "--precision",
        help=(
            "default: PyTorch's own (fp32 matmuls at highest precision, cuDNN TF32 on); "
            "fp32: TF32 off everywhere; tf32: TF32 on; bf16-amp / fp16-amp: autocast"
        ),
    ),
    device: str | None = typer.Option(None, "--device", help="cuda or cpu (default: cuda if present)"),
    mode: Mode = ModeOpt,
    out: Path | None = OutOpt,
    nvtx_modules: bool = NvtxModulesOpt,
    baseline: bool = BaselineOpt,
    verify: int = VerifyOpt,
    ncu_kernels: int = NcuKernelsOpt,
    calibrate: bool = CalibrateOpt,
    as_json: bool = JsonOpt,
    html: bool = HtmlOpt,
    verbose: bool = VerboseOpt,
    quiet: bool = QuietOpt,
    include_paths: bool = PathsOpt,
    fail_on: Severity | None = FailOnOpt,
) -> None:
    """Diagnose a built-in workload: `hybrid diagnose --model resnet50 --batch-size 32 --steps 50`."""
    # Checked here, not left to the workload: a bad value would otherwise run defaults silently, or
    # fail inside the script with the reason buried in its console.log.
    for flag, value, example in (("--steps", steps, 20), ("--batch-size", batch_size, 32)):
        if value is not None and value < 1:
            raise UsageError(
                f"{flag} must be at least 1 (got {value})", f"pass {flag} {example}, for example"
            )
    from hybrid.collect.orchestrate import RunOptions, Target
    from hybrid.models import MODEL_NAMES, cpu_defaults

    if model not in MODEL_NAMES:
        raise UsageError(f"unknown model {model!r}", f"choose one of: {', '.join(MODEL_NAMES)}")
    if device is None:
        device = "cuda" if _cuda_available() else "cpu"
    _check_device(device)
    if device == "cpu":
        shrunk = cpu_defaults(model)
        given = {"batch_size": batch_size, "steps": steps, "warmup": warmup}
        applied = {k: v for k, v in shrunk.items() if given.get(k) is None}
        batch_size = batch_size or shrunk.get("batch_size")
        steps = steps or shrunk.get("steps")
        warmup = warmup if warmup is not None else shrunk.get("warmup")
        if applied and not quiet:
            # What was shrunk, not what was given. The warmup is the least dropped: the header then counts
            # every step dropped until step times settled (7 for resnet50 on 2 cores).
            settle = "; more warmup steps are dropped until step times settle" if "warmup" in applied else ""
            _stderr(
                "no CUDA device: GPU analysis is not possible here; running a small CPU version "
                f"({', '.join(f'{k}={v}' for k, v in applied.items())}{settle})"
            )
    steps = steps or 20
    warmup = warmup if warmup is not None else 5
    # Room for the warmup to grow until step times settle; the injector stops the loop after the
    # measured steps.
    from hybrid.collect.orchestrate import SHORT_PLAIN_STEPS
    from hybrid.load.settle import MAX_EXTRA_WARMUP

    # ... and for the plain window the torch pass times before its collector starts.
    model_args = [
        model,
        "--steps",
        str(steps + warmup + MAX_EXTRA_WARMUP + SHORT_PLAIN_STEPS + 5),
        "--precision",
        precision.value,
        "--device",
        device,
    ]
    if batch_size:
        model_args += ["--batch-size", str(batch_size)]
    target = Target(argv=["hybrid.models", *model_args], is_module=True)
    options = RunOptions(
        out_dir=out or _default_out(model),
        unique_out_dir=out is None,
        mode=mode.value,
        warmup=warmup,
        steps=steps,
        nvtx_modules=nvtx_modules,
        baseline=baseline,
        verify=verify,
        ncu_kernels=ncu_kernels,
        calibrate=calibrate,
    )
    _profile_and_report(
        target,
        options,
        as_json=as_json,
        html=html,
        verbose=verbose,
        quiet=quiet,
        include_paths=include_paths,
        fail_on=fail_on,
        model=model,
    )


@app.command()
@handles_errors
def report(
    path: Path = typer.Argument(
        ..., help="a run directory, an nsys .sqlite export made elsewhere, or a results.json"
    ),
    ncu: Path | None = typer.Option(
        None,
        "--ncu",
        help="ncu CSV (--csv --print-units base) of the same program, "
        "to add hardware counters to an nsys export; with a run directory, used "
        "instead of its own ncu/counters.csv",
    ),
    step_range: str | None = typer.Option(None, "--step-range", help="NVTX range name that marks a step"),
    rank: int | None = RankOpt,
    as_json: bool = JsonOpt,
    html: bool = typer.Option(False, "--html", help="also write report.html into the report folder"),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="folder for results.json, report.txt (and report.html); default hybrid-reports/NAME-N in the "
        "working directory, a new one each time. The input is never written to unless named here",
    ),
    verbose: bool = VerboseOpt,
    include_paths: bool = PathsOpt,
    fail_on: Severity | None = FailOnOpt,
) -> None:
    """Re-analyze saved artifacts offline (a run directory or someone's nsys export), or re-render a
    results.json whose artifacts are gone. Reads its input only: what it writes goes to a new folder."""
    from hybrid.pipeline import analyze_export, analyze_run_dir

    if not path.exists():
        raise UsageError(
            f"{path} does not exist", "pass a run directory, an .sqlite export or a results.json"
        )
    if not path.is_file() and not path.is_dir():  # a FIFO would block the read forever, a device never end
        raise UsageError(
            f"{path} is not a regular file or a directory (a FIFO, device or socket)",
            "pass a run directory, an .sqlite export or a results.json",
        )
    if ncu is not None and not ncu.is_file():
        raise UsageError(f"ncu CSV not found: {ncu}", "check the --ncu path")
    from hybrid.files import reads

    for given in (path, ncu):
        if given is not None and given.is_file():
            reads(given)
    if path.is_file() and path.suffix == ".json":
        # Nothing to re-analyze: the document is shown as it was written.
        with _received(path):
            _render_saved(
                _complete(_load_results(path), path),
                report_dir=_report_dir(path, out) if html or out else None,
                html=html,
                as_json=as_json,
                verbose=verbose,
                include_paths=include_paths,
                fail_on=fail_on,
                location=str(path.parent),
            )
        return
    if path.is_dir():
        from hybrid.analysis.job_metrics import is_job_dir

        run_dir: Path | None = path
        if is_job_dir(path):
            from hybrid.pipeline import analyze_job, rank_path

            if rank is not None:
                run_dir = rank_path(path, rank)
                results = analyze_run_dir(run_dir, step_range=step_range, ncu_csv=ncu)
            elif ncu is not None:
                raise UsageError(
                    f"{path} is a multi-process run: --ncu counters belong to one rank's kernels",
                    "add --rank N to analyze that rank with them",
                )
            else:
                results = analyze_job(path)
        else:
            if rank is not None:
                raise UsageError(
                    f"{path} is a single-process run: --rank applies to multi-process runs", "drop --rank"
                )
            if _artifacts_gone(path):
                _stderr(f"{path} keeps no raw artifacts: showing its results.json as it was written")
                with _received(path / "results.json"):
                    _render_saved(
                        _complete(_load_results(path), path / "results.json"),
                        report_dir=_report_dir(path, out) if html or out else None,
                        html=html,
                        as_json=as_json,
                        verbose=verbose,
                        include_paths=include_paths,
                        fail_on=fail_on,
                        location=str(path),
                    )
                return
            results = analyze_run_dir(path, step_range=step_range, ncu_csv=ncu)
    else:
        results = analyze_export(path, ncu_csv=ncu, step_range=step_range)
        run_dir = None
    _save_report(
        results,
        _report_dir(path, out),
        artifacts_base=run_dir or path.parent,
        html=html,
        include_paths=include_paths,
    )
    _emit(
        results,
        run_dir=None,
        as_json=as_json,
        html=False,
        verbose=verbose,
        include_paths=include_paths,
        fail_on=fail_on,
        location=run_dir or path.parent,
    )


REPORTS_DIR_ENV = "HYBRID_REPORTS_DIR"  # where `hybrid report` makes its folders (default ./hybrid-reports)


def _report_dir(source: Path, out: Path | None) -> Path | None:
    """Where `hybrid report` writes: --out as given (the user may name any folder, the input's own
    included), else a new NAME-N in $HYBRID_REPORTS_DIR or ./hybrid-reports, N the first number free,
    never inside the input (a received capture may be read-only or shared: from a working directory
    inside it, the folder goes beside the input instead). None, said on stderr, when no folder can be
    made there: the report is then printed only."""
    if out is not None:
        return out
    name = source.resolve().name if source.is_dir() else source.stem
    if source.is_file() and source.name == "results.json":
        name = source.resolve().parent.name  # runs/r50/results.json -> r50
    base = Path(os.environ.get(REPORTS_DIR_ENV) or "hybrid-reports")
    if source.is_dir() and base.resolve().is_relative_to(source.resolve()):
        base = source.resolve().parent / "hybrid-reports"
    from hybrid.files import claimed

    for number in range(1, 10_000):
        folder = base / f"{name}-{number}"
        try:
            base.mkdir(parents=True, exist_ok=True)
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as error:
            _stderr(f"warning: cannot make a report folder in {base} ({error.strerror}); pass --out DIR")
            return None
        claimed(folder)
        return folder
    _stderr(f"warning: {base} holds 9999 reports of {name}; pass --out DIR")
    return None


def _save_report(
    results: dict, report_dir: Path | None, *, artifacts_base: Path, html: bool, include_paths: bool
) -> None:
    """results.json, report.txt (and report.html) in the report folder, said on stderr; a folder that
    cannot be written still gets its report printed, with a warning. The saved document's artifacts
    are rebased onto the report folder, so that `hybrid report FOLDER/results.json` still finds them."""
    if report_dir is None:
        return
    from hybrid.errors import OutputError

    saved = dict(results)
    saved["artifacts"] = {
        key: Path(os.path.relpath(artifacts_base.absolute() / relative, report_dir.absolute())).as_posix()
        for key, relative in (results.get("artifacts") or {}).items()
    }
    written: list[str] = []
    try:
        _save_reports(saved, report_dir, written, html=html, include_paths=include_paths)
    except OutputError as error:
        kept = f"only {', '.join(written)} saved" if written else "nothing saved"
        _stderr(f"warning: {kept} in {report_dir} ({error.cause}); the report is on stdout only")
        return
    _stderr(f"report folder: {report_dir}  ({', '.join(written)})")


def _write_page(path: Path, page: str) -> None:
    """Write an HTML page beside its input; where that is not writable, say so and go on with the report."""
    from hybrid.errors import OutputError
    from hybrid.files import InputCollision, write_file

    try:
        write_file(path, page)
    except InputCollision:
        raise
    except OutputError as error:
        reason = error.__cause__.strerror if isinstance(error.__cause__, OSError) else error.cause
        _stderr(f"warning: could not write {path}: {reason}; the report is printed only")
        return
    _stderr(f"wrote {path}")


def _artifacts_gone(path: Path) -> bool:
    """A run directory holding a results.json but none of the artifacts it was made from."""
    from hybrid.rundir import RunDir

    run = RunDir(path)
    return (path / "results.json").is_file() and run.torch_trace() is None and run.nsys_export() is None


def _render_saved(
    results: dict,
    *,
    report_dir: Path | None,
    html: bool,
    as_json: bool,
    verbose: bool,
    include_paths: bool,
    fail_on: Severity | None,
    location: str,
) -> None:
    """Show a saved results document without re-analysis (never rewriting it: a copy goes to the report
    folder)."""
    from rich.console import Console

    # Only the artifacts still beside the document get a command to open them.
    artifacts = results.get("artifacts") if isinstance(results.get("artifacts"), dict) else {}
    results["artifacts"] = {
        key: relative
        for key, relative in artifacts.items()
        if isinstance(relative, str) and (Path(location) / relative).is_file()
    }

    from hybrid.report.json_report import results_to_json
    from hybrid.report.terminal import print_report
    from hybrid.streams import json_text

    _save_report(results, report_dir, artifacts_base=Path(location), html=html, include_paths=include_paths)
    if as_json:
        sys.stdout.write(json_text(results_to_json(results)))
    else:
        # The commands that open the artifacts name them from here: a report folder's document reaches
        # them through ../ (hybrid-reports/r50-1/../../r50/torch/trace.json reads r50/torch/trace.json).
        shown = {
            key: os.path.normpath(os.path.join(location, relative))
            for key, relative in results["artifacts"].items()
        }
        print_report(
            {**results, "artifacts": shown},
            Console(no_color=bool(os.environ.get("NO_COLOR")) or None),
            verbose=verbose,
        )
    _fail_on(results, fail_on)


@contextlib.contextmanager
def _received(*sources: Path):
    """Rendering results documents read from files hybrid did not necessarily write: a value of a type
    no renderer expects (a hand-edited or damaged file) is bad input naming the file, not a traceback.
    The findings were already cleaned on load (hybrid.schema.typed_findings); this catches the rest."""
    try:
        yield
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, ArithmeticError) as error:
        named = " or ".join(str(source) for source in sources)
        raise UsageError(
            f"{named} holds a value of a type results.json never has ({type(error).__name__}: "
            f"{str(error)[:120]})",
            "re-create it with `hybrid report RUN_DIR` from the run's artifacts",
        ) from None


def _load_results(path: Path) -> dict:
    import json

    from hybrid.files import read_regular_text, reads

    target = path / "results.json" if path.is_dir() else path
    reads(target)
    fix = "re-create it with `hybrid report RUN_DIR`"
    try:
        document = json.loads(read_regular_text(target), parse_int=_json_int)
    except FileNotFoundError:
        if path.is_dir() and (path / "run.json").is_file():  # a run directory never analyzed (or re-analyzed)
            raise UsageError(
                f"{target} not found: {path} holds a run that was not analyzed",
                f"analyze it first with `hybrid report {path} --out {path}`, then compare",
            ) from None
        raise UsageError(
            f"{target} not found", "pass a run directory holding results.json, or the file itself"
        ) from None
    except IsADirectoryError:
        raise UsageError(f"{target} is a directory", "pass a run directory holding results.json") from None
    except OSError as error:
        raise UsageError(f"cannot read {target}: {error.strerror or error}", "check the path") from None
    except (ValueError, RecursionError) as error:
        raise UsageError(f"{target} is not a results.json document: {error}", fix) from None
    if not isinstance(document, dict):
        raise UsageError(
            f"{target} is not a results.json document: it holds a JSON {type(document).__name__}, "
            "not an object",
            "pass the results.json that `hybrid run` or `hybrid report` wrote",
        )
    from hybrid.schema import typed_findings

    problems = typed_findings(document, str(target))
    if problems and isinstance(document.get("warnings"), list):
        document["warnings"] += problems
    return document


def _json_int(text: str) -> int | float:
    """A JSON integer; one beyond a float's range (10**400) reads as inf, which every reader already treats
    as no measurement, instead of an int no figure can be computed with (OverflowError in float())."""
    return int(text) if len(text.lstrip("-")) <= 308 else float(text)


def _complete(document: dict, target: Path) -> dict:
    """A results document that has the contract's keys (hybrid.schema), else bad input naming what is
    missing."""
    from hybrid.schema import missing_keys

    try:
        missing = missing_keys(document)
    except (AttributeError, TypeError):  # a section of the wrong type (a number where an object belongs)
        missing = ["sections of the right types"]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise UsageError(
            f"{target} is not a complete results.json document: it lacks {shown}",
            "re-create it with `hybrid report RUN_DIR` from the run's artifacts",
        )
    return document


def _threshold(value: float | None) -> float | None:
    import math

    if value is not None and not math.isfinite(value):
        raise UsageError(
            f"--fail-on-regression {value} is not a number of percent",
            "give a finite threshold, e.g. --fail-on-regression 5",
        )
    return value


@app.command()
@handles_errors
def compare(
    run_a: Path = typer.Argument(..., help="the baseline: a run directory or its results.json"),
    run_b: Path = typer.Argument(..., help="the candidate: a run directory or its results.json"),
    fail_on_regression: float | None = typer.Option(
        None,
        "--fail-on-regression",
        metavar="PCT",
        help="exit 1 when B's mean step time is slower than A's at 95% confidence (Welch's t on the steps) "
        "and by an estimated more than PCT percent; exit 5 when the data cannot decide (above PCT but "
        "within the noise, an interval too wide to rule out twice PCT, or a run without a step time)",
    ),
    allow_different: bool = typer.Option(
        False,
        "--allow-different",
        help="compare runs of different programs, models, batch sizes or devices "
        "(or exports that do not record their program and share little kernel time), which is refused "
        "otherwise",
    ),
    as_json: bool = JsonOpt,
    html: Path | None = typer.Option(
        None, "--html", metavar="FILE", help="also write the comparison as an HTML page"
    ),
) -> None:
    """Compare two runs: step time (a test of the means, on the plain pass's steps where both have one),
    GPU utilization, roofline, top kernels, findings resolved/new (only where both runs measured what a
    finding rests on)."""
    import json

    from hybrid.files import check_output
    from hybrid.report.compare import compare_results, gate, render_compare
    from hybrid.streams import json_text

    threshold = _threshold(fail_on_regression)
    with _received(run_a, run_b):
        documents = _load_results(run_a), _load_results(run_b)
        if html is not None:
            check_output(html)  # before anything is printed: `--html A/results.json` is refused, exit 2
        diff = compare_results(*documents)
        _refuse_incomparable(diff, (run_a, run_b), allow_different=allow_different)
        text = json.dumps(diff, indent=1, default=str) if as_json else render_compare(diff)
    sys.stdout.write((json_text(text) if as_json else text) + "\n")
    if html is not None:
        from hybrid.report.html_report import render_compare_html

        _write_page(html, render_compare_html(diff, (str(run_a), str(run_b))))
    if threshold is not None:
        from hybrid.report.safe_text import escape_strings

        decided = escape_strings(gate(diff, threshold))
        if decided["outcome"] == "regressed":
            _stderr(f"regression gate failed: {decided['reason']}")
            raise typer.Exit(EXIT_FINDING_AT_OR_ABOVE)
        if decided["outcome"] == "inconclusive":
            _stderr(f"regression gate undecided (exit {EXIT_GATE_UNDECIDED}): {decided['reason']}")
            raise typer.Exit(EXIT_GATE_UNDECIDED)
        _stderr(f"regression gate passed: {decided['reason']}")


def _refuse_incomparable(diff: dict, paths: tuple[Path, Path], *, allow_different: bool) -> None:
    """A figure no measurement gives (a negative step time) is bad input naming the file; runs of different
    workloads are refused unless --allow-different (their step times say nothing about a change)."""
    from hybrid.report.safe_text import escape_controls

    problems = [
        f"{path}: {problem}"
        for path, side in zip(paths, ("a", "b"), strict=True)
        for problem in diff["problems"][side]
    ]
    if problems:
        raise UsageError(
            "; ".join(escape_controls(problem) for problem in problems),
            "re-create the results.json with `hybrid report RUN_DIR` from the run's artifacts",
        )
    if diff["workload"]["differences"] and not allow_different:
        raise UsageError(
            "refusing to compare: "
            + "; ".join(escape_controls(str(d)) for d in diff["workload"]["differences"]),
            "compare two runs of the same workload, or pass --allow-different to see the "
            "comparison anyway (its step-time change then says nothing about a fix)",
        )


@app.command()
@handles_errors
def doctor(as_json: bool = JsonOpt) -> None:
    """Check Python, torch, CUDA, the GPU, nsys and ncu, and say which mode `hybrid run` would use."""
    from hybrid.doctor import diagnose_environment, render_doctor

    facts = diagnose_environment()
    if as_json:
        import json

        sys.stdout.write(json.dumps(facts, indent=1) + "\n")  # ensure_ascii: any terminal can carry it
    else:
        sys.stdout.write(render_doctor(facts))


def _check_device(device: str) -> None:
    kind, _, index = device.partition(":")
    if kind not in ("cuda", "cpu") or (index and (kind == "cpu" or not index.isdigit())):
        raise UsageError(f"unsupported device {device!r}", "use --device cuda (or cuda:N) or --device cpu")
    if kind == "cuda" and not _cuda_available():
        raise UsageError(
            f"--device {device} was asked for but torch sees no CUDA device on this machine",
            "run on a machine with an NVIDIA GPU and a CUDA build of torch, or pass --device cpu",
        )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def main() -> None:
    from hybrid.streams import finish_stdout, guard_streams

    guard_streams()
    try:
        app(prog_name="hybrid")
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    try:
        finish_stdout()
    except HybridError as error:  # stdout on a full disk: said, with its own exit code
        _stderr(error.message())
        code = error.exit_code if code in (0, None) else code
    sys.exit(code)
