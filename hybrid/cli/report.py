"""`hybrid report`: re-analyze saved artifacts offline, or show a results.json as it was written."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from hybrid.cli.app import FailOnOpt, JsonOpt, PathsOpt, RankOpt, Severity, VerboseOpt
from hybrid.cli.output import emit, exit_at_fail_on, handles_errors, print_stderr, save_reports
from hybrid.cli.received import complete, load_results, received
from hybrid.errors import UsageError


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
        with received(path):
            _render_saved(
                complete(load_results(path), path),
                report_dir=_report_dir(path, out) if html or out else None,
                html=html,
                as_json=as_json,
                verbose=verbose,
                include_paths=include_paths,
                fail_on=fail_on,
                location=str(path.parent),
            )
        return
    # Imported past the results.json case, which renders without them: 0.58 -> 0.30 s for `hybrid report
    # results.json` (pandas and the analysis, 0.28 s of imports).
    from hybrid.pipeline import analyze_export, analyze_run_dir

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
                print_stderr(f"{path} keeps no raw artifacts: showing its results.json as it was written")
                with received(path / "results.json"):
                    _render_saved(
                        complete(load_results(path), path / "results.json"),
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
    emit(
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
            print_stderr(f"warning: cannot make a report folder in {base} ({error.strerror}); pass --out DIR")
            return None
        claimed(folder)
        return folder
    print_stderr(f"warning: {base} holds 9999 reports of {name}; pass --out DIR")
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
        save_reports(saved, report_dir, written, html=html, include_paths=include_paths)
    except OutputError as error:
        kept = f"only {', '.join(written)} saved" if written else "nothing saved"
        print_stderr(f"warning: {kept} in {report_dir} ({error.cause}); the report is on stdout only")
        return
    print_stderr(f"report folder: {report_dir}  ({', '.join(written)})")


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
    exit_at_fail_on(results, fail_on)
