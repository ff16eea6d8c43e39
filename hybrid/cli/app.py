"""The typer application, the choices its options take, and the options several commands share."""

from __future__ import annotations

from enum import Enum

import typer

from nsight.ncu import DEFAULT_BUDGET_S as NCU_DEFAULT_BUDGET_S

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
NcuBudgetOpt = typer.Option(
    NCU_DEFAULT_BUDGET_S,
    "--ncu-budget-s",
    metavar="SECONDS",
    help="with --mode auto, the seconds ncu may spend replaying kernels (about 0.43 s a launch): the kernels "
    "whose counters can change the answer, most of that time per launch first; 0: no budget "
    "(--mode hybrid replays every selected kernel)",
)


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
