"""What every command does with what it made: messages on stderr, a HybridError as its exit code, the
reports saved and printed, the --fail-on gate."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from hybrid.cli.app import Severity
from hybrid.errors import (
    EXIT_FINDING_AT_OR_ABOVE,
    EXIT_INTERNAL_ERROR,
    EXIT_INTERRUPTED,
    HybridError,
    Terminated,
    UsageError,
)


def print_stderr(text: str) -> None:
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
            print_stderr(error.message())
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            print_stderr(
                "interrupted: stopped the workload; what was gathered so far is kept in the run directory"
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Terminated as stop:
            print_stderr(f"terminated: {stop}; nothing already written was lost")
            raise typer.Exit(stop.exit_code) from None
        except typer.Exit:
            raise
        except Exception:  # noqa: BLE001 - a defect in hybrid: its own exit code, never --fail-on's 1
            import traceback

            print_stderr(traceback.format_exc().rstrip())
            print_stderr(
                "internal error: hybrid failed on this input (a defect, not your mistake); please report "
                "it with the traceback above and, if you can, the file it read"
            )
            raise typer.Exit(EXIT_INTERNAL_ERROR) from None
        finally:
            _say_kept()

    return wrapper


def _say_kept() -> None:
    """Name the files hybrid found where its outputs go and kept as numbered copies before replacing them."""
    from hybrid.files import kept_copies

    kept = kept_copies()
    if kept:
        print_stderr("earlier files kept: " + ", ".join(f"{old.name} as {copy.name}" for old, copy in kept))


def save_reports(
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


def emit(
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
            save_reports(results, run_dir, written, html=html, include_paths=include_paths)
        except OutputError as error:
            saved = f"only {', '.join(written)} saved" if written else "nothing saved"
            print_stderr(f"warning: {saved} in {run_dir} ({error.cause}); the report is on stdout only")
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
            print_stderr(f"run directory: {run_dir}  ({shown})")
    exit_at_fail_on(results, fail_on)


def exit_at_fail_on(results: dict, fail_on: Severity | None) -> None:
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
            print_stderr(
                f"--fail-on {fail_on.value}: [{finding.get('severity')}] {finding.get('id')}: "
                f"{finding.get('title')} ({format_value(finding.get('time_lost_ms'), 'ms')}/step est.)"
            )
        raise typer.Exit(EXIT_FINDING_AT_OR_ABOVE)


def write_page(path: Path, page: str) -> None:
    """Write an HTML page beside its input; where that is not writable, say so and go on with the report."""
    from hybrid.errors import OutputError
    from hybrid.files import InputCollision, write_file

    try:
        write_file(path, page)
    except InputCollision:
        raise
    except OutputError as error:
        reason = error.__cause__.strerror if isinstance(error.__cause__, OSError) else error.cause
        print_stderr(f"warning: could not write {path}: {reason}; the report is printed only")
        return
    print_stderr(f"wrote {path}")
