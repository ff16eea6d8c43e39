"""`hybrid run` and `hybrid diagnose`: profile a script or a built-in model, then report."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import typer

from hybrid.cli.app import (
    BaselineOpt,
    CalibrateOpt,
    CallsitesOpt,
    FailOnOpt,
    HtmlOpt,
    JsonOpt,
    Mode,
    ModeOpt,
    NcuBudgetOpt,
    NcuKernelsOpt,
    NvtxModulesOpt,
    OutOpt,
    PathsOpt,
    Precision,
    QuietOpt,
    RankOpt,
    Severity,
    TorchStacksOpt,
    VerboseOpt,
    VerifyOpt,
)
from hybrid.cli.output import emit, handles_errors, print_stderr
from hybrid.errors import EXIT_INTERRUPTED, Terminated, UsageError


def _default_out(stem: str) -> Path:
    return Path("hybrid-runs") / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"


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
            print_stderr(f"interrupted: partial run kept in {orchestrator.run_dir.path}")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Terminated as stop:
            print_stderr(
                f"terminated: {stop}: the workload's process group was sent {stop.name} and stopped; "
                f"partial run kept in {orchestrator.run_dir.path}"
            )
            raise typer.Exit(stop.exit_code) from None
    results = orchestrator.results()
    emit(
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
    emit(
        results,
        run_dir=run_dir if rank is None else rank_path(run_dir, rank),
        as_json=as_json,
        html=html,
        verbose=verbose,
        include_paths=include_paths,
        fail_on=fail_on,
    )


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
    ncu_budget_s: float = NcuBudgetOpt,
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
        ncu_budget_s=ncu_budget_s,
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
    ncu_budget_s: float = NcuBudgetOpt,
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
    from hybrid.model_names import MODEL_NAMES

    if model not in MODEL_NAMES:
        raise UsageError(f"unknown model {model!r}", f"choose one of: {', '.join(MODEL_NAMES)}")
    if device is not None:
        _check_device_name(device)
    from hybrid.collect.orchestrate import RunOptions, Target

    # Every option is checked before the built-in models are imported (torch: 2.4 s of a mistyped
    # --ncu-kernels) and before the CPU notice says what will run; the CPU's sizes replace the defaults after.
    options = RunOptions(
        out_dir=out or _default_out(model),
        unique_out_dir=out is None,
        mode=mode.value,
        nvtx_modules=nvtx_modules,
        baseline=baseline,
        verify=verify,
        ncu_kernels=ncu_kernels,
        ncu_budget_s=ncu_budget_s,
        calibrate=calibrate,
    )
    if warmup is not None:
        options.warmup = warmup
    options.validate()
    from hybrid.cuda_presence import cuda_available

    if device is None:
        device = "cuda" if cuda_available() else "cpu"
    else:
        _check_cuda_present(device)
    if device == "cpu":
        from hybrid.models import cpu_defaults  # torch: the CPU run imports it anyway

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
            print_stderr(
                "no CUDA device: GPU analysis is not possible here; running a small CPU version "
                f"({', '.join(f'{k}={v}' for k, v in applied.items())}{settle})"
            )
    steps = steps or options.steps
    warmup = warmup if warmup is not None else options.warmup
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
    options = dataclasses.replace(options, warmup=warmup, steps=steps)
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


def _check_device_name(device: str) -> None:
    kind, _, index = device.partition(":")
    if kind not in ("cuda", "cpu") or (index and (kind == "cpu" or not index.isdigit())):
        raise UsageError(f"unsupported device {device!r}", "use --device cuda (or cuda:N) or --device cpu")


def _check_cuda_present(device: str) -> None:
    from hybrid.cuda_presence import cuda_available

    if device.startswith("cuda") and not cuda_available():
        raise UsageError(
            f"--device {device} was asked for but torch sees no CUDA device on this machine",
            "run on a machine with an NVIDIA GPU and a CUDA build of torch, or pass --device cpu",
        )
