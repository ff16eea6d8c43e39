"""The terminal report (rich). The default output fits one screen (at most 60 lines of 100 columns on every
committed H200 capture, tests/test_report_reading.py): run summary, roofline position against the peaks,
the top findings with their evidence, the rest a line or two each, the changes to make first, the notes
that change the reading, passes. `verbose` shows everything: every finding in full, the top-kernel, layer
and roofline-kernel tables, every metric.

Everything taken from the profiled program (kernel, layer, op names, NVTX text) and from results
(titles, messages) is put on screen as `rich.text.Text`, never as a markup string: C++ names contain
`[lambda() (instance 1)]`, which rich's markup would read as a style tag. Control characters in any of
it are escaped first (hybrid.report.safe_text): a kernel name cannot move the cursor or forge a line."""

from __future__ import annotations

import io
import os
import sys
from collections import Counter
from typing import Literal

from rich.align import Align
from rich.console import Console, Group, RenderableType
from rich.constrain import Constrain
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from hybrid.report import waterfall
from hybrid.report.common import (
    findings_by_impact,
    format_value,
    instead_of,
    metric_source_counts,
    overhead_noise,
    roofline_vs_peaks,
    short_name,
    short_source,
    source_label,
    through_text,
    weighed_lost_ms,
)
from hybrid.report.kernel_labels import distinct_labels, launch_text
from hybrid.report.notes import NO_COUNTERS, Note, reading_notes
from hybrid.report.safe_text import escape_strings
from hybrid.report.units import format_change_pct, is_number, noun
from hybrid.report.verified import figure_note, range_note, replay_error_line, skipped_line, verify_line
from hybrid.report.views import artifact_views

# Caps that keep the default report on one screen with the nine findings of the busiest real document.
FULL_FINDINGS_DEFAULT = 2  # findings shown with their evidence (the explanation is verbose's)
FINDING_ROWS_DEFAULT = 9  # findings listed at all (the busiest real document has nine); the rest counted
EVIDENCE_DEFAULT = 3  # evidence lines per full finding
RECOMMENDATIONS_DEFAULT = 3  # one per finding, in ranked order
# Idle causes the Step line names, largest first; the rest are verbose's (verify/hf_trainer_tf32_paired:
# 3 more of 6, 1.36 of its 6.64 ms idle, a line of the Step's three).
IDLE_CAUSES_DEFAULT = 3
NOTES_DEFAULT = 2  # limitations shown after the notes that change the reading, before "N more"
TABLE_ROWS_VERBOSE = 15  # rows of the kernel, layer and roofline tables
REPORT_WIDTH = 100  # one screen's width; a narrower terminal wraps
MIN_WIDTH = 20  # a console narrower than this is a wrong COLUMNS value, not a terminal
TEXT_EVIDENCE_WIDTH = 40  # a name given as evidence, so that label, name and source share one line
KERNEL_NAME_WIDTH = 60  # shortened kernel names in the tables, leaving room for five number columns
ROOFLINE_NAME_WIDTH = 36  # the roofline table's six figure columns take the rest

SEVERITY_STYLE = {"CRITICAL": "bold white on red", "SEVERE": "bold red", "MODERATE": "yellow", "LOW": "dim"}
SOURCE_STYLE = "cyan"


def use_color(stream: object = None) -> bool:
    """Colour only on a terminal and never when NO_COLOR is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    stream = stream if stream is not None else sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def _tag(source: object) -> Text:
    return Text(f"  [{source_label(str(source or 'unknown'))}]", style=SOURCE_STYLE)


def _job(results: dict) -> list[Text]:
    """Multi-process runs: the job first (ranks, slowest and straggler rank, communication), then the
    representative rank's own summary below it."""
    job = results.get("job")
    if not job:
        return []
    metrics = job.get("metrics") or {}

    def value(name: str, unit: str) -> str:
        return format_value((metrics.get(name) or {}).get("value"), unit)

    per_rank = job.get("per_rank") or {}
    steps = " · ".join(
        f"rank {rank} {format_value(row.get('step_time_ms'), 'ms')}" for rank, row in per_rank.items()
    )
    lines = [
        Text.assemble(
            ("Job", "bold"),
            f": {job.get('world_size')} ranks ({job.get('backend') or 'backend unknown'})"
            f" · step per rank: {steps} · slowest rank {job.get('slowest_rank')}",
        )
    ]
    straggler = job.get("straggler") or {}
    comm = (
        f"communication {value('comm_ms', 'ms')}/step, exposed {value('exposed_comm_ms', 'ms')}, "
        f"overlap {value('overlap_pct', '%')}"
    )
    if straggler.get("rank") is not None:
        comm = (
            f"straggler rank {straggler['rank']} (others wait "
            f"{format_value(straggler.get('lateness_ms'), 'ms')}"
            f"/step) · " + comm
        )
    lines.append(Text(f"  {comm}  [{source_label(str(job.get('comm_source') or ''))}]"))
    lines.append(
        Text(
            f"  below: rank {job.get('representative_rank')}'s own report (--rank K for another)", style="dim"
        )
    )
    return lines


STEP_FOUND_BY = {
    "optimizer_hook": "optimizer step hook",
    "mark_step": "hybrid.mark_step()",
    "profiler_step": "the script's prof.step()",
    "module_call": "detected (module calls)",
    "script_loop": "detected (the script's loop)",
    "pattern": "repeating NVTX range",
    "periodicity": "detected (periodic CUDA calls)",
    "steady-window": "no step found",
}


def _header(results: dict) -> Text:
    device, workload = results.get("device") or {}, results.get("workload") or {}
    name = device.get("name") or "no GPU"
    if device.get("sm_count"):
        name += f" ({device['sm_count']} SMs)"
    measured = workload.get("steps_measured")
    steps = f"{measured} {noun('steps', measured)} measured"
    if workload.get("warmup_steps") is not None:  # unknown for exports made outside hybrid
        steps += f" after {workload['warmup_steps']} warmup"
    text = Text.assemble(("hybrid", "bold"), f" · {name} · mode {results.get('mode')} · {steps}")
    if workload.get("batch_size"):
        text.append(f" · batch {workload['batch_size']}")
    if workload.get("step_unit"):
        # What one step is and how it was found (workload.step_*); a guess is a warning, not a footnote.
        low = workload.get("step_confidence") == "low"
        found_by = STEP_FOUND_BY.get(str(workload.get("step_source")), "found")
        text.append(
            f"\nstep = {workload['step_unit']} · {found_by}, {workload.get('step_confidence')} confidence",
            style="yellow" if low else None,
        )
        if low and workload.get("step_reason"):
            text.append(f"\nwarning: the step is a guess: {workload['step_reason']}", style="yellow")
    return text


def _idle_parts(timing: dict, verbose: bool) -> str:
    # Only the causes that cost time; a zero entry tells the reader nothing on the one-screen report.
    parts = sorted(
        ((ms, cause) for cause, ms in (timing.get("idle_breakdown_ms") or {}).items() if ms), reverse=True
    )
    shown = parts if verbose else parts[:IDLE_CAUSES_DEFAULT]
    return ", ".join(f"{cause} {format_value(ms, 'ms')}" for ms, cause in shown)


def _step(results: dict, verbose: bool) -> Text:
    timing = results.get("timing") or {}
    line = Text.assemble(("Step ", "bold"), format_value(timing.get("step_time_ms"), "ms"))
    if timing.get("step_time_std_ms") is not None:
        line.append(f" ± {format_value(timing['step_time_std_ms'], 'ms')}")
    if timing.get("step_time_median_ms") is not None:
        line.append(f" (median {format_value(timing['step_time_median_ms'], 'ms')})")
    if timing.get("gpu_busy_ms") is not None:
        line.append(
            f" · GPU busy {format_value(timing['gpu_busy_ms'], 'ms')} "
            f"({format_value(timing.get('gpu_util_pct'), '%')})"
        )
    if timing.get("gpu_idle_ms"):
        idle = _idle_parts(timing, verbose)
        line.append(f" · idle {format_value(timing['gpu_idle_ms'], 'ms')}" + (f" ({idle})" if idle else ""))
    line = line + _tag(timing.get("source"))
    if timing.get("weighed_at_plain_step"):
        # What that means for the findings' figures only where there are findings to weigh.
        measured = [
            f for f in (results.get("diagnosis") or {}).get("bottlenecks") or [] if not f.get("not_measured")
        ]
        weighed = ": findings are weighed at the plain step (the first column)" if measured else ""
        plain = format_value(timing.get("baseline_step_time_ms"), "ms")
        overhead = timing.get("collector_overhead_pct") or 0.0
        # A document written before `collector_distorted` was weighed at the plain step only for that.
        if timing.get("collector_distorted", True):
            line.append(
                f"\n  the collector slowed the step by {overhead:+.0f}% over the plain pass "
                f"({plain}){weighed}",
                style="yellow",
            )
        elif measured and timing.get("replay_host_scale"):
            # The step hid the collector; its host did not (hybrid.replay.predict.replay_findings).
            line.append(
                f"\n  plain pass {plain} (the collector {overhead:+.0f}%; replayed with the host at "
                f"{timing['replay_host_scale']:.2f} of its profiled time{_fitted_range(timing)}){weighed}",
                style="dim",
            )
    return line


def _fitted_range(timing: dict) -> str:
    """'; the plain step fits 0.40-0.95' where the device bounds the step, so the plain step time only
    bounds the host's speed and the plain-step savings rest on the middle of that range; '' where the
    range is narrow (under 10% wide) or not recorded."""
    fitted = timing.get("replay_host_scale_range")
    if not (isinstance(fitted, list) and len(fitted) == 2 and fitted[0] and fitted[1] > 1.1 * fitted[0]):
        return ""
    return f"; the plain step fits {fitted[0]:.2f}-{fitted[1]:.2f}"


def _sources(results: dict) -> Text:
    counts = metric_source_counts(results)
    measured = {source: n for source, n in counts.items() if source.startswith("measured:")}
    parts = []
    if measured:
        by_collector = ", ".join(f"{short_source(source)} {n}" for source, n in measured.items())
        parts.append(f"{sum(measured.values())} measured ({by_collector})")
    parts += [f"{n} {source}" for source, n in counts.items() if not source.startswith("measured:")]
    return Text.assemble(("Metrics: ", "bold"), " · ".join(parts) or "none")


def _roofline(results: dict) -> list[Text]:
    roof = results.get("roofline") or {}
    if roof.get("bound") is None:
        reason = roof.get("reason") or "not available in this mode"
        return [Text.assemble(("Roofline: ", "bold"), f"not placed ({reason})")]
    position = roofline_vs_peaks(results)
    # With several precisions placed, the bound is the mix's, not the largest share's.
    label = position["bound_label"]
    lines = [
        Text.assemble(
            ("Roofline: ", "bold"),
            f"{roof['bound']}-bound" + (f" ({label})" if label else ""),
            f" · AI {format_value(roof.get('arithmetic_intensity'), 'FLOP/B')} (ridge "
            f"{format_value(roof.get('ridge_point'))}) · "
            f"{format_value(roof.get('achieved_pct_of_attainable'), '%')} of attainable",
        )
        + _tag(roof.get("source"))
    ]
    # Each achieved rate next to the roof it is a share of, and where that roof's figure comes from.
    rates = [
        (
            "",
            roof.get("flops_per_s"),
            "FLOP/s",
            position["compute_pct"],
            position["compute_peak"],
            position["compute_label"],
        ),
        ("DRAM ", roof.get("bytes_per_s"), "B/s", position["dram_pct"], position["dram_peak"], None),
    ]
    line = Text("  ")
    for index, (label, rate, unit, pct, reference, peak_name) in enumerate(rates):
        line.append(
            (" · " if index else "")
            + f"{label}{format_value(rate, unit)} = {format_value(pct, '%')} of "
            + (format_value(reference["value"], reference.get("unit", "")) if reference else "unknown peak")
            + (f" {peak_name}" if peak_name else "")
        )
        if reference:
            line.append_text(Text(f" [{source_label(str(reference.get('source', '')))}]", style=SOURCE_STYLE))
    lines.append(line)
    coverage = ((results.get("metrics") or {}).get("ncu_coverage_pct") or {}).get("value")
    if roof.get("time_ms") is not None or coverage is not None:
        # The point stands for the kernels ncu profiled; a reader must know how much of the step that is.
        basis = f"  over {format_value(roof.get('time_ms'), 'ms')} of profiled kernels"
        if coverage is not None:
            basis += f", {format_value(coverage, '%')} of the step's kernel time"
        lines.append(Text(basis, style="dim"))
    return lines


def _one_line_names(value: str) -> str:
    """A name, or a comma-separated list of names, cut to TEXT_EVIDENCE_WIDTH: a list keeps its first
    names whole and counts the rest."""
    names = [name.strip() for name in value.split(", ")]
    if len(names) == 1:
        return short_name(value, TEXT_EVIDENCE_WIDTH)
    kept = [short_name(names[0], TEXT_EVIDENCE_WIDTH)]
    for name in names[1:]:
        if len(", ".join([*kept, name])) > TEXT_EVIDENCE_WIDTH:
            break
        kept.append(name)
    rest = len(names) - len(kept)
    return ", ".join(kept) + (f" (+{rest} more)" if rest else "")


def _evidence(item: dict, verbose: bool) -> Text:
    value = item.get("value")
    if isinstance(value, str):  # names (kernels, ops, layers): one line by default, whole in verbose
        shown = value if verbose else _one_line_names(value)
    else:
        shown = format_value(value, item.get("unit", ""))
    return Text.assemble((f"{item.get('label', '')}: ", "bold"), shown) + _tag(item.get("source"))


def _finding_title(finding: dict, *, marked_primary: bool, verbose: bool, numbers: dict[str, int]) -> Text:
    """The title in the row beside its figures; the category before it in verbose only (the title says what
    is wrong, the category only files it)."""
    title = Text(str(finding.get("title", "")))
    if verbose:
        title = Text.assemble((str(finding.get("category", "")), "bold"), "  ") + title
    if marked_primary:
        title.append("  (primary)", style="bold")
    # An alternative claims time other findings own: its saving is instead of theirs, not on top.
    alternative = instead_of(finding, numbers)
    if alternative:
        title.append(f"  ({alternative})", style="dim")
    return title


def _finding_details(
    finding: dict, timing: dict, *, expanded: bool, verbose: bool, callsite_said: bool
) -> list[RenderableType]:
    """What goes under a finding's row, at full width: what --verify realized (a measured saving outranks
    every predicted figure beside it), the user's line, then for an expanded finding why its figure is not
    the replay's own and its evidence; verbose adds the explanation and the fixes."""
    details: list[RenderableType] = []
    realized = verify_line(finding)
    if realized is not None:
        style = "bold green" if finding["verify"].get("status") == "realized" else "yellow"
        details.append(Text(realized, style=style))
    top = _top_callsite(finding)
    if top is not None and not callsite_said:
        details.append(_callsite_line(top, "", verbose))
    if not expanded:
        return details
    through = through_text(top) if top is not None and _through_shown(top) else None
    if through is not None:  # the library code the line's time went to (a Trainer's `.train()`)
        line = Text(through, style="dim")
        if not verbose:
            line.no_wrap, line.overflow = True, "ellipsis"
        details.append(line)
    # Beside the figure: where it is not the replay's own (a closed form, or corrected), and how far the
    # host's plain speed moves it.
    for note in (figure_note(finding), range_note(finding, timing)):
        if note is not None:
            details.append(Text.assemble((f"{note[0]}: ", "bold"), note[1]))
    evidence = finding.get("evidence") or []
    shown = evidence if verbose else evidence[:EVIDENCE_DEFAULT]
    details += [_evidence(item, verbose) for item in shown]  # the rest: --verbose, as the table's title says
    if verbose:
        if finding.get("explanation"):
            details.append(Text.assemble(("why: ", "bold"), str(finding["explanation"])))
        details += [Text.assemble(("fix: ", "green"), str(fix)) for fix in finding.get("suggestions") or []]
        if finding.get("callsite_reason"):
            details.append(Text(str(finding["callsite_reason"]), style="dim"))
    return details


# A callsite's library code is said under it where the first library site holds this share of the finding:
# the Trainer's FP32 GEMMs went 66% through accelerate's backward; its launch-bound finding's first site held
# 7%, a line that would say little (hybrid.report.common.through_text; HTML and JSON keep every one).
THROUGH_SHOWN_PCT = 20.0


def _through_shown(callsite: dict) -> bool:
    inside = callsite.get("inside") or []
    share = inside[0].get("share_pct") if inside and isinstance(inside[0], dict) else None
    return isinstance(share, (int, float)) and share >= THROUGH_SHOWN_PCT


def _top_callsite(finding: dict) -> dict | None:
    """The user's line with the largest share of the finding."""
    callsites = finding.get("callsites") or []
    return callsites[0] if callsites else None


def _place(callsite: dict) -> tuple:
    return tuple(callsite.get(key) for key in ("file", "line", "module", "source_line", "function"))


def _shared_callsite(findings: list[dict]) -> dict | None:
    """The top callsite of every listed finding where it is one line for all of them: a Hugging Face
    Trainer's `.train()` places every finding of its run, said once above the table rather than on each
    of 6 rows (6 lines of verify/hf_trainer_tf32_paired)."""
    tops = [_top_callsite(finding) for finding in findings]
    first = tops[0] if len(tops) > 1 else None
    if first is None or any(top is None or _place(top) != _place(first) for top in tops[1:]):
        return None
    return first


# Under this share of its finding, the user's line says how much it holds: the H100 torchaudio run's
# DataLoader stall read "at ...:27 optimizer.step()" for 8.9% of its time, the rest in no line of the script.
PLACED_SHARE_SAID_PCT = 50.0


def _callsite_line(top: dict, lead: str, verbose: bool) -> Text:
    """'at train.py:42 (in module layer3.0)  total += loss.item()', the module its kernels were launched in
    where module ranges were recorded; 'in module layer3.0' where no line places them. One line cut with an
    ellipsis after file:line by default (a Trainer(...) call wrapped to 3 lines), whole in verbose."""
    if top.get("file") is None:
        line = Text.assemble(f"{lead}in module ", (str(top.get("module")), "bold"))
    else:
        share = top.get("share_pct")
        line = Text.assemble(
            f"{lead}at ",
            (f"{top.get('file')}:{top.get('line')}", "bold"),
            f" (in module {top['module']})" if top.get("module") else "",
            (f" ({share:.0f}% of it)", "dim") if is_number(share) and share < PLACED_SHARE_SAID_PCT else "",
            f"  {top.get('source_line') or top.get('function') or ''}".rstrip(),
        )
    if not verbose:
        line.no_wrap, line.overflow = True, "ellipsis"
    return line


# The leading column where --verify measured a fix's saving: the figure the finding was ranked on.
REALIZED_COLUMN = "realized"


def _figure(finding: dict, key: str, timing: dict) -> object:
    """A finding's figure; the plain step's share from its parts where the document predates the field;
    the saving `--verify` measured ("realized") only where the diagnosis ranked the finding on it."""
    if key == REALIZED_COLUMN:
        return finding.get("weighed_lost_ms") if finding.get("weighed_on") == "realized" else None
    if key == "time_lost_baseline_pct" and key not in finding and timing.get("baseline_step_time_ms"):
        plain_ms = finding.get("time_lost_baseline_ms")
        return None if plain_ms is None else 100.0 * plain_ms / timing["baseline_step_time_ms"]
    return finding.get(key)


def _cell(finding: dict, key: str, timing: dict) -> str:
    """A figure column's text; "-" in the realized column for a finding --verify did not measure."""
    value = _figure(finding, key, timing)
    if value is None and key == REALIZED_COLUMN:
        return "-"
    return format_value(value, "%" if key.endswith("pct") else "ms")


def _below_floor(results: dict) -> list[Text]:
    """'2 findings dropped: their fix saves under their floor once replayed (memory.uncoalesced
    1.96 µs, ...)'."""
    below = (results.get("diagnosis") or {}).get("below_floor") or []
    if not below:
        return []
    names = ", ".join(f"{b.get('id')} {format_value(b.get('weighed_lost_ms'), 'ms')}" for b in below)
    return [
        Text(
            f"{len(below)} {noun('findings', len(below))} left out: "
            "the time a fix would save is under the rule's "
            f"floor ({names}); results.json: diagnosis.below_floor",
            style="dim",
        )
    ]


def _findings(results: dict, verbose: bool) -> list[RenderableType]:
    # Why a listed finding's fix went unverified is verbose's (2 of the H100 loader run's 62 lines).
    lines = (replay_error_line(results), skipped_line(results) if verbose else None)
    verified = [line for line in lines if line]
    return _finding_table(results, verbose) + _below_floor(results) + [Text(line) for line in verified]


def _figure_columns(findings: list[dict], timing: dict, realized: bool) -> list[tuple[str, str]]:
    """(header, key) of each figure column. Where a collector slowed the step, findings are weighed at the
    plain step: its figure leads (and grades), the profiled step's follows. Otherwise the profiled figure
    leads, the plain one beside it. A header longer than its figures goes on two lines."""
    plain = any("time_lost_baseline_ms" in f for f in findings)
    columns = (
        [
            ("lost/step\n(plain)", "time_lost_baseline_ms"),
            ("%", "time_lost_baseline_pct"),
            ("profiled", "time_lost_ms"),
        ]
        if timing.get("weighed_at_plain_step")
        else [
            ("lost/step", "time_lost_ms"),
            *([("plain", "time_lost_baseline_ms")] if plain else []),
            ("%", "time_lost_pct"),
        ]
    )
    return [("realized", REALIZED_COLUMN), *columns] if realized else columns


def _fixed_widths(headers: list[str], rows: list[list[Text]]) -> list[int]:
    """The width of each column left of the finding's title: its widest header line or figure, the same in
    every row's table so that the rows line up."""
    return [
        max(
            *(Text(line).cell_len for line in header.split("\n")),
            *(row[index].cell_len for row in rows),
        )
        for index, header in enumerate(headers)
    ]


def _row_table(headers: list[str], widths: list[int], show_header: bool) -> Table:
    """One finding's row: its figures in fixed columns, its title in the rest of the width. Each row is a
    table of its own so that what goes under it takes the full width (in one table it wrapped in the
    title's column, 55 of 100 columns: with the callsite cut to one line, 109 → 72 lines on
    verify/hf_trainer_tf32_paired)."""
    table = Table(
        box=None, padding=(0, 1, 0, 0), pad_edge=False, header_style="bold", show_header=show_header
    )
    for index, (header, width) in enumerate(zip(headers, widths, strict=True)):
        side: Literal["left", "right"] = "left" if index == 1 else "right"  # the severity, the figures
        table.add_column(
            # A one-line header sits on the last line of a two-line header row, beside the figures' names.
            Align(Text(header), align=side, vertical="bottom"),
            justify=side,
            style="magenta" if index > 1 else "",
            width=width,
            no_wrap=True,
        )
    table.add_column("finding", ratio=1)
    return table


def _finding_table(results: dict, verbose: bool) -> list[RenderableType]:
    findings = findings_by_impact(results)
    if not findings:
        return [
            Text("Bottlenecks: none detected in what this run measured (limitations below)", style="bold")
        ]
    # Time lost is a rule's model of what fixing the finding would save: an estimate, said once in the
    # header, unless `--verify` measured the fix (its column leads then); each evidence line carries its
    # own source.
    realized = any(f.get("weighed_on") == "realized" for f in findings)
    title = f"Bottlenecks ({len(findings)}), by severity then time lost per step " + (
        "(realized by --verify where shown, else estimated)" if realized else "(estimated)"
    )
    if not verbose and len(findings) > FULL_FINDINGS_DEFAULT:
        title += "; all evidence with --verbose"
    listed = findings if verbose else findings[:FINDING_ROWS_DEFAULT]
    shared = _shared_callsite(listed)
    heading: list[RenderableType] = [Text(title, style="bold")]
    if shared is not None:
        heading.append(_callsite_line(shared, "every finding: ", verbose))
    return [*heading, *_finding_rows(results, findings, listed, verbose, shared is not None)] + _hidden(
        results, findings[len(listed) :]
    )


def _finding_rows(
    results: dict, findings: list[dict], listed: list[dict], verbose: bool, callsite_said: bool
) -> list[RenderableType]:
    """Each listed finding's row, and under it, indented past its number, what it is said with."""
    timing = results.get("timing") or {}
    columns = _figure_columns(findings, timing, any(f.get("weighed_on") == "realized" for f in findings))
    rows = [
        [
            Text(str(number)),
            Text(str(f.get("severity", "")), style=SEVERITY_STYLE.get(str(f.get("severity", "")), "")),
            *(Text(_cell(f, key, timing)) for _header, key in columns),
        ]
        for number, f in enumerate(listed, start=1)
    ]
    headers = ["#", "severity", *(header for header, _key in columns)]
    widths = _fixed_widths(headers, rows)
    primary = ((results.get("diagnosis") or {}).get("primary_bottleneck") or {}).get("id")
    # The analysis's primary bottleneck is normally ranked first; say so only where the ranking differs.
    marked = primary if findings[0].get("id") != primary else None
    expanded = len(findings) if verbose else FULL_FINDINGS_DEFAULT
    numbers = {str(f.get("id")): n for n, f in enumerate(findings, start=1)}
    blocks: list[RenderableType] = []
    for number, (finding, cells) in enumerate(zip(listed, rows, strict=True), start=1):
        table = _row_table(headers, widths, show_header=number == 1)
        title = _finding_title(
            finding, marked_primary=finding.get("id") == marked, verbose=verbose, numbers=numbers
        )
        table.add_row(*cells, title)
        blocks.append(table)
        details = _finding_details(
            finding, timing, expanded=number <= expanded, verbose=verbose, callsite_said=callsite_said
        )
        if details:
            blocks.append(Padding(Group(*details), (0, 0, 0, widths[0] + 1)))
    return blocks


def _hidden(results: dict, hidden: list[dict]) -> list[RenderableType]:
    """'+ 3 more (2 LOW, 1 MODERATE; 1.2 ms/step est. together) with --verbose': the findings not
    listed."""
    if not hidden:
        return []
    timing = results.get("timing") or {}
    by_severity = Counter(str(f.get("severity")) for f in hidden)
    lost = sum(weighed_lost_ms(f, timing) for f in hidden if not f.get("alternative_to"))
    return [
        Text(
            f"+ {len(hidden)} more ({', '.join(f'{n} {s}' for s, n in by_severity.items())}; "
            f"{format_value(lost, 'ms')}/step est. together) with --verbose",
            style="dim",
        )
    ]


def _recommendations(results: dict, verbose: bool) -> list[RenderableType]:
    # Each change once, as the highest-ranked finding that asks for it words it, with every finding
    # whose first suggestion it is (the same change proposed for two reasons is one thing to do).
    picks: dict[str, tuple[str, list[int]]] = {}
    includes: dict[str, list[str]] = {}
    for number, finding in enumerate(findings_by_impact(results), start=1):
        if not finding.get("suggestions"):
            continue
        change = _change(finding)
        # The change alone by default; why it applies restates the evidence above it and named the
        # kernels it is about in full (7 of verify/hf_trainer_tf32_paired's 12 lines here): verbose's.
        said = str(finding["suggestions"][0]) if verbose else change
        picks.setdefault(change, (said, []))[1].append(number)
        includes.setdefault(change, _included(finding))
    picks = _folded(picks, includes, verbose)
    shown = list(picks.values()) if verbose else list(picks.values())[:RECOMMENDATIONS_DEFAULT]
    if not shown:
        return []
    # A grid gives a wrapped suggestion a hanging indent under its text, not under its rank.
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right")
    grid.add_column(ratio=1)
    for rank, (fix, numbers) in enumerate(shown, start=1):
        grid.add_row(f"{rank}.", Text.assemble(fix, (f"  ({', '.join(f'#{n}' for n in numbers)})", "dim")))
    heading = Text("What to change first", style="bold")
    if not verbose:
        # The count left out, on the heading's line (a report holds one screen): the torchvision detection
        # eval's fourth change, TF32 for its FP32 GEMMs, was one line to add and left no trace.
        left_out = len(picks) - len(shown)
        more = f"; {left_out} more change{'s' if left_out > 1 else ''} there" if left_out else ""
        heading.append(f" (why each applies: --verbose{more})", style="dim")
    return [heading, grid]


def _included(finding: dict) -> list[str]:
    """The other changes its first suggestion makes too (hybrid.rules.advice.Suggestion.includes)."""
    advice = finding.get("advice") or []
    first = advice[0] if advice and isinstance(advice[0], dict) else {}
    included = first.get("includes")
    return [text for text in included if isinstance(text, str)] if isinstance(included, list) else []


def _folded(
    picks: dict[str, tuple[str, list[int]]], includes: dict[str, list[str]], verbose: bool
) -> dict[str, tuple[str, list[int]]]:
    """A change another listed change makes too is listed once, as that change, at the rank of the first
    of the two, for the findings of both: the default compile inside the reduce-overhead compile (resnet50:
    #1 asks for the one, #2 for the other; one edit does both). Verbose says why each applies."""
    into = {inner: outer for outer in picks for inner in includes.get(outer, []) if inner in picks}
    folded: dict[str, tuple[str, list[int]]] = {}
    for change, (said, numbers) in picks.items():
        outer = into.get(change, change)
        entry = folded.get(outer, (picks[outer][0], []))
        text = entry[0] + (f"; it includes {said}" if verbose and outer != change else "")
        folded[outer] = (text, entry[1] + numbers)
    return {change: (said, sorted(numbers)) for change, (said, numbers) in folded.items()}


def _change(finding: dict) -> str:
    """The change a finding's first suggestion asks for: its advice's text, else the suggestion up to its
    '(why: ...)'."""
    advice = finding.get("advice") or []
    if advice and isinstance(advice[0], dict) and advice[0].get("text"):
        return str(advice[0]["text"])
    return str(finding["suggestions"][0]).split(" (why: ")[0]


def _notes(results: dict, verbose: bool) -> list[Text]:
    """Every note that changes the reading, then NOTES_DEFAULT of the other limitations (all in verbose)."""
    notes = reading_notes(results)
    if (results.get("workload") or {}).get("step_unit"):
        notes = [n for n in notes if n.topic != "steps"]  # the header says what a step is and how sure
    summed_up = [] if verbose else _said_elsewhere(notes, results)
    notes = [n for n in notes if n not in summed_up]
    shown = [n for n in notes if n.changes_reading or verbose]
    shown += [n for n in notes if not n.changes_reading][: 0 if verbose else NOTES_DEFAULT]
    lines = [Text.assemble((f"{note.kind}: ", "yellow"), note.text) for note in shown]
    hidden = len(notes) - len(shown) + len(summed_up)
    if hidden:
        lines.append(Text(f"+ {hidden} more {noun('notes', hidden)} (--verbose)", style="dim"))
    return lines


def _said_elsewhere(notes: list[Note], results: dict) -> list[Note]:
    """The notes another line of the default view sums up, left to verbose. The Passes line gives each
    collector's overhead and the ncu pass's outcome, so the slowdown and ncu-plan notes are verbose's (on
    the H200 stranger runs these notes were 11 of a 122-line report; the plan on 2 of 12 kernels, 5 lines
    of verify/hf_trainer_tf32_paired); the no-counters limitation names what each counter family's
    placeholder says again (3 notes of the torchaudio stranger)."""
    topics = {"passes"} if results.get("passes") else set()
    if any(n.text.startswith(NO_COUNTERS) for n in notes):
        topics.add("counters")
    return [n for n in notes if n.topic in topics]


def _views(results: dict, location: str | None) -> list[Text]:
    """Each command on one line of its own (printed soft-wrapped: copied whole)."""
    views = artifact_views(results, location)
    if not views:
        return []
    lines = [Text("Open the raw views", style="bold")]
    for what, command in views:
        lines.append(Text.assemble((f"{what}: ", "dim"), command))
    return lines


def _pass_part(item: dict) -> str:
    part = str(item.get("name"))
    if item.get("process"):
        part += f" in the {item['process']} process"  # a window of another pass's process (the plain window)
    if item.get("status") != "ok":
        part += f" {item.get('status')}"
    details = (
        [format_value(item["wall_s"], "s")]
        if item.get("wall_s") is not None and item.get("status") != "skipped"
        else []
    )
    step = item.get("step_time_ms")
    if item.get("name") == "ncu" and step is not None:
        # ncu serializes and replays each profiled kernel: its step time says what the pass cost, not how
        # much the collector slows the program.
        details.append(f"replay {format_value(step / 1000, 's')}/step")
    elif step is not None:
        details.append(f"{format_value(step, 'ms')}/step")
        if item.get("name") != "plain" and item.get("overhead_pct") is not None:
            details.append(f"overhead {format_change_pct(item['overhead_pct'])}{overhead_noise(item)}")
    if (item.get("status") != "ok" or item.get("name") in ("calibration", "ncu")) and item.get("message"):
        # the calibration's: the speedups it measured; ncu's: where its replay budget cut the launches
        details.append(str(item["message"]))
    return part + (f" ({', '.join(details)})" if details else "")


def _passes(results: dict, verbose: bool) -> list[Text]:
    passes = results.get("passes") or []
    if not passes:
        return []
    lines = [Text.assemble(("Passes: ", "bold"), " · ".join(_pass_part(item) for item in passes))]
    if verbose:
        lines.append(
            Text(
                "overhead = step time under the collector vs the plain pass (--baseline), within step "
                "noise where its 95% interval holds no change; ncu replays each profiled kernel, so its "
                "step time is replay cost",
                style="dim",
            )
        )
    return lines


def _table(title: str, headers: tuple[str, ...]) -> Table:
    table = Table(title=Text(title), title_justify="left", box=None, pad_edge=False)
    for index, header in enumerate(headers):
        left = index == 0 or header in ("bound", "source", "<<<grid, block>>>")
        table.add_column(header, justify="left" if left else "right")
    return table


def _sources_title(rows: list[dict]) -> str:
    return ", ".join(sorted({source_label(str(row.get("source", ""))) for row in rows}))


LAUNCH_WIDTH = 20  # room the name column gives up to a launch column ('<<<(36,7,32), (8,8)>>> +10' is 26)


def _kernel_cells(kernels: list[dict], width: int) -> list[tuple[Text, str]]:
    """Each kernel's name, told apart from the others (hybrid.report.kernel_labels), and its launch
    configuration; the name narrows by LAUNCH_WIDTH where a launch column is shown."""
    launches = [launch_text(kernel) for kernel in kernels]
    room = width - (LAUNCH_WIDTH if any(launches) else 0)
    labels = distinct_labels([str(kernel.get("name", "")) for kernel in kernels], room)
    return [(Text(label), launch) for label, launch in zip(labels, launches, strict=True)]


def _kernel_table(results: dict) -> RenderableType:
    kernels = (results.get("top_kernels") or [])[:TABLE_ROWS_VERBOSE]
    if not kernels:
        return Text("Top kernels: no kernel timeline in this mode", style="dim")
    cells = _kernel_cells(kernels, KERNEL_NAME_WIDTH)
    launch = any(text for _label, text in cells)
    table = _table(
        f"Top kernels per step [{_sources_title(kernels)}]",
        ("kernel", *(("<<<grid, block>>>",) if launch else ()), "calls", "total", "mean", "share"),
    )
    for kernel, (label, text) in zip(kernels, cells, strict=True):
        table.add_row(
            label,
            *((text,) if launch else ()),
            format_value(kernel.get("calls_per_step")),
            format_value(kernel.get("total_ms_per_step"), "ms"),
            format_value(kernel.get("mean_us"), "us"),
            format_value(kernel.get("share_pct"), "%"),
        )
    return table


def _layer_table(results: dict) -> RenderableType:
    layers = results.get("layers") or []
    if not layers:
        return Text("Layers: no module ranges in this run (profile with --nvtx-modules)", style="dim")
    table = _table(
        f"Layers by GPU time per step [{_sources_title(layers)}]",
        ("layer", "GPU time", "kernels", "share of step"),
    )
    for layer in layers[:TABLE_ROWS_VERBOSE]:
        table.add_row(
            Text(short_name(str(layer.get("name", "")), KERNEL_NAME_WIDTH)),
            format_value(layer.get("gpu_ms"), "ms"),
            format_value(layer.get("kernels")),
            format_value(layer.get("share_of_step_pct"), "%"),
        )
    return table


def _roofline_table(results: dict) -> RenderableType:
    kernels = sorted(
        (results.get("roofline") or {}).get("kernels") or [], key=lambda k: -(k.get("time_ms") or 0.0)
    )
    if not kernels:
        return Text("Roofline kernels: none placed in this mode", style="dim")
    kernels = kernels[:TABLE_ROWS_VERBOSE]
    # Five figures leave the name about 36 columns: the launch goes under it, on a line of its own.
    labels = distinct_labels([str(kernel.get("name", "")) for kernel in kernels], ROOFLINE_NAME_WIDTH)
    table = _table(
        f"Roofline kernels [{_sources_title(kernels)}]", ("kernel", "time", "AI", "FLOP/s", "DRAM", "bound")
    )
    for kernel, label in zip(kernels, labels, strict=True):
        flops = format_value(kernel.get("flops_per_s"), "FLOP/s")
        if kernel.get("precision"):
            flops += f" {kernel['precision']}"
        launch = launch_text(kernel)
        table.add_row(
            Text(label) + (Text("\n  " + launch, style="dim") if launch else Text("")),
            format_value(kernel.get("time_ms"), "ms"),
            format_value(kernel.get("ai"), "FLOP/B"),
            flops,
            format_value(kernel.get("bytes_per_s"), "B/s"),
            str(kernel.get("bound") or "n/a"),
        )
    return table


def _metrics_table(results: dict) -> RenderableType:
    metrics = results.get("metrics") or {}
    table = _table("All metrics", ("metric", "value", "source"))
    for name, metric in metrics.items():
        value = metric.get("value")
        shown = value if isinstance(value, str) else format_value(value, metric.get("unit", ""))
        table.add_row(Text(name), Text(shown or "(none)"), Text(source_label(str(metric.get("source", "")))))
    return table


def _with_gaps(sections: list[list[RenderableType]]) -> list[RenderableType]:
    blocks: list[RenderableType] = []
    for section in sections:
        if section:
            blocks += [*([Text("")] if blocks else []), *section]
    return blocks


def print_report(
    results: dict, console: Console, *, verbose: bool = False, location: str | None = None
) -> None:
    """Print the report of one results dict on a rich console, at most REPORT_WIDTH columns wide.
    `location`: the run directory as the user named it, for the commands that open its artifacts."""
    if console.width < MIN_WIDTH:  # COLUMNS=0 or a pipe reporting no width: rich would print nothing
        console.width = REPORT_WIDTH
    results = escape_strings(results)
    summary = [
        _header(results),
        *_job(results),
        _step(results, verbose),
        *_roofline(results),
        _sources(results),
    ]
    sections = [summary, _findings(results, verbose), _recommendations(results, verbose)]
    if verbose:
        sections += [
            waterfall.terminal_lines(results),
            [_kernel_table(results)],
            [_layer_table(results)],
            [_roofline_table(results)],
            [_metrics_table(results)],
        ]
    sections.append(_notes(results, verbose) + _passes(results, verbose))
    console.print(Constrain(Group(*_with_gaps(sections)), width=REPORT_WIDTH), overflow="fold")
    views = _views(results, None if location is None else str(escape_strings(location)))
    if views:
        console.print()
    for line in views:
        console.print(line, soft_wrap=True)  # never wrapped or cut: a command must copy whole


def render_terminal(
    results: dict, *, verbose: bool = False, color: bool | None = None, location: str | None = None
) -> str:
    """The terminal report as a string. color=None colours only when stdout is a terminal and NO_COLOR is
    unset; without colour the text carries no ANSI codes at all."""
    colored = use_color() if color is None else color and not os.environ.get("NO_COLOR")
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=REPORT_WIDTH,
        force_terminal=colored,
        color_system="standard" if colored else None,
        no_color=not colored,
        highlight=False,
        emoji=False,
        markup=False,
        soft_wrap=False,
    )
    print_report(results, console, verbose=verbose, location=location)
    # Tables pad cells to the full width; trailing blanks only cost the reader a wider copy-paste.
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"
