"""`hybrid compare`: two runs side by side, and the regression gate."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from hybrid.cli.app import JsonOpt
from hybrid.cli.output import handles_errors, print_stderr, write_page
from hybrid.cli.received import load_results, received
from hybrid.errors import EXIT_FINDING_AT_OR_ABOVE, EXIT_GATE_UNDECIDED, UsageError


def _threshold(value: float | None) -> float | None:
    import math

    if value is not None and not math.isfinite(value):
        raise UsageError(
            f"--fail-on-regression {value} is not a number of percent",
            "give a finite threshold, e.g. --fail-on-regression 5",
        )
    return value


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
    with received(run_a, run_b):
        documents = load_results(run_a), load_results(run_b)
        if html is not None:
            check_output(html)  # before anything is printed: `--html A/results.json` is refused, exit 2
        diff = compare_results(*documents)
        _refuse_incomparable(diff, (run_a, run_b), allow_different=allow_different)
        text = json.dumps(diff, indent=1, default=str) if as_json else render_compare(diff)
    sys.stdout.write((json_text(text) if as_json else text) + "\n")
    if html is not None:
        from hybrid.report.html_report import render_compare_html

        write_page(html, render_compare_html(diff, (str(run_a), str(run_b))))
    if threshold is not None:
        from hybrid.report.safe_text import escape_strings

        decided = escape_strings(gate(diff, threshold))
        if decided["outcome"] == "regressed":
            print_stderr(f"regression gate failed: {decided['reason']}")
            raise typer.Exit(EXIT_FINDING_AT_OR_ABOVE)
        if decided["outcome"] == "inconclusive":
            print_stderr(f"regression gate undecided (exit {EXIT_GATE_UNDECIDED}): {decided['reason']}")
            raise typer.Exit(EXIT_GATE_UNDECIDED)
        print_stderr(f"regression gate passed: {decided['reason']}")


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
