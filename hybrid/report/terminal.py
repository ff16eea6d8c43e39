"""The terminal report (rich). Default output fits one screen: summary, roofline, the top findings in
full and the rest one line each, recommendations, limitations, passes. `verbose` adds every finding
in full and the top-kernel and per-layer tables.

Everything taken from the profiled program (kernel, layer, op names, NVTX text) and from results
(titles, messages) is put on screen as `rich.text.Text`, never as a markup string: C++ names contain
`[lambda() (instance 1)]`, which rich's markup would read as a style tag."""

from __future__ import annotations

import io
import os
import sys

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from hybrid.report import findings_by_impact, format_value, short_name, source_label, sources_of

# One screen is ~50 lines; these caps keep the default report there for a dozen findings.
FULL_FINDINGS_DEFAULT = 2  # findings shown with evidence, explanation and fixes
EVIDENCE_DEFAULT = 4  # evidence lines per full finding
FIXES_DEFAULT = 2  # suggestions per full finding
RECOMMENDATIONS_DEFAULT = 3  # one per finding, in ranked order
NOTES_DEFAULT = 3  # limitations + warnings lines before "N more"
TABLE_ROWS_VERBOSE = 15  # rows of the kernel and layer tables
REPORT_WIDTH = 110  # wide enough for a shortened kernel name plus its numbers

SEVERITY_STYLE = {"CRITICAL": "bold white on red", "SEVERE": "bold red", "MODERATE": "yellow", "LOW": "dim"}


def use_color(stream: object = None) -> bool:
    """Colour only on a terminal and never when NO_COLOR is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    stream = stream if stream is not None else sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def _labelled(label: str, value: object, unit: str, source: str | None) -> Text:
    text = Text.assemble((f"{label}: ", "bold"), format_value(value, unit))
    if source:
        text.append(f"  [{source_label(source)}]", style="cyan")
    return text


def _badge(severity: str) -> Text:
    return Text(f"[{severity}]", style=SEVERITY_STYLE.get(severity, ""))


def _time_lost(finding: dict) -> Text:
    # A rule's time-lost figure is a model of what fixing it would save: always an estimate.
    return Text(f"{format_value(finding.get('time_lost_ms'), 'ms')}/step "
                f"({format_value(finding.get('time_lost_pct'), '%')}) [estimated]", style="magenta")


def _summary(results: dict) -> list[Text]:
    device, workload, timing = results.get("device") or {}, results.get("workload") or {}, results.get("timing") or {}
    primary = (results.get("diagnosis") or {}).get("primary_bottleneck")
    timing_source = timing.get("source")
    lines = [Text.assemble(("hybrid", "bold"), f" · {device.get('name') or 'no GPU'} · mode {results.get('mode')} · "
                           f"{workload.get('steps_measured')} steps measured, {workload.get('warmup_steps')} warmup")]
    if primary:
        lines.append(Text.assemble(("Primary: ", "bold"), _badge(primary.get("severity", "")), " ",
                                   str(primary.get("category", "")), "  ", str(primary.get("title", "")), "  ",
                                   _time_lost(primary)))
    else:
        lines.append(Text("Primary: no bottleneck found", style="bold"))
    step = Text.assemble(("Step time: ", "bold"), format_value(timing.get("step_time_ms"), "ms"))
    if timing.get("step_time_std_ms") is not None:
        step.append(f" ± {format_value(timing['step_time_std_ms'], 'ms')}")
    step.append(f" · GPU busy {format_value(timing.get('gpu_busy_ms'), 'ms')} "
                f"({format_value(timing.get('gpu_util_pct'), '%')} util)")
    if timing.get("kernel_time_ms") is not None:
        step.append(f" · compute {format_value(timing['kernel_time_ms'], 'ms')} "
                    f"({format_value(timing.get('compute_util_pct'), '%')})")
    if timing_source:
        step.append(f"  [{source_label(timing_source)}]", style="cyan")
    lines.append(step)
    measured = sorted({str(m.get("source", "")).split(":", 1)[1] for m in (results.get("metrics") or {}).values()
                       if str(m.get("source", "")).startswith("measured:")})
    lines.append(Text.assemble(("Measured by: ", "bold"), ", ".join(measured) or "nothing",
                               (" · estimated: ", "bold"), _estimated_summary(results)))
    return lines


def _estimated_summary(results: dict) -> str:
    names = [name for name, m in (results.get("metrics") or {}).items() if m.get("source") == "estimated"]
    roofline = results.get("roofline") or {}
    if roofline.get("source") == "estimated":
        names.insert(0, "roofline")
    return ", ".join(names) or "nothing"


def _roofline(results: dict) -> list[Text]:
    roof = results.get("roofline") or {}
    if not roof or roof.get("bound") is None:
        return [Text.assemble(("Roofline: ", "bold"), "not available in this mode")]
    precision = f" ({roof['precision']})" if roof.get("precision") else ""
    line = Text.assemble(("Roofline: ", "bold"), f"{roof.get('bound')}-bound · AI "
                         f"{format_value(roof.get('arithmetic_intensity'), 'FLOP/B')} · ridge "
                         f"{format_value(roof.get('ridge_point'), 'FLOP/B')}{precision} · "
                         f"{format_value(roof.get('achieved_pct_of_attainable'), '%')} of attainable · "
                         f"peak DRAM {format_value(roof.get('memory_bw_pct_of_peak'), '%')}, "
                         f"compute {format_value(roof.get('compute_pct_of_peak'), '%')}")
    line.append(f"  [{source_label(str(roof.get('source', '')))}]", style="cyan")
    return [line]


def _finding_full(finding: dict, verbose: bool) -> Text:
    lines = [Text.assemble(_badge(finding.get("severity", "")), " ", (str(finding.get("category", "")), "bold"),
                           "  ", str(finding.get("title", "")), "  ", _time_lost(finding))]
    evidence = finding.get("evidence") or []
    shown = evidence if verbose else evidence[:EVIDENCE_DEFAULT]
    for item in shown:
        lines.append(Text("  ") + _labelled(str(item.get("label", "")), item.get("value"), item.get("unit", ""),
                                            str(item.get("source", ""))))
    if len(shown) < len(evidence):
        rest = evidence[len(shown):]
        lines.append(Text(f"  + {len(rest)} more evidence ({', '.join(sources_of({'evidence': rest}))})",
                          style="dim"))
    if finding.get("not_measured"):
        lines.append(Text("  not measured in this run", style="dim"))
    if finding.get("explanation"):
        lines.append(Text.assemble("  ", ("why: ", "bold"), str(finding["explanation"])))
    fixes = finding.get("suggestions") or []
    for fix in fixes if verbose else fixes[:FIXES_DEFAULT]:
        lines.append(Text.assemble("  ", ("fix: ", "green"), str(fix)))
    return Text("\n").join(lines)


def _finding_line(finding: dict) -> Text:
    line = Text.assemble(_badge(finding.get("severity", "")), " ", str(finding.get("category", "")), "  ",
                         str(finding.get("title", "")))
    if finding.get("time_lost_ms"):
        line.append(f"  {format_value(finding['time_lost_ms'], 'ms')}/step est.", style="magenta")
    line.append(f"  ({', '.join(sources_of(finding)) or 'no evidence'})", style="dim")
    return line


def _findings(results: dict, verbose: bool) -> list:
    findings = findings_by_impact(results)
    if not findings:
        return [Text("Bottlenecks: none detected", style="bold")]
    # A grid gives wrapped lines a hanging indent under the finding's text, not under its number.
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", width=2)
    grid.add_column()
    full = len(findings) if verbose else FULL_FINDINGS_DEFAULT
    for index, finding in enumerate(findings, start=1):
        grid.add_row(Text(str(index)), _finding_full(finding, verbose) if index <= full else _finding_line(finding))
    return [Text(f"Bottlenecks ({len(findings)})", style="bold underline"), grid]


def _recommendations(results: dict, verbose: bool) -> list[Text]:
    picks: dict[str, str] = {}  # suggestion -> category of the highest-ranked finding that made it
    for finding in findings_by_impact(results):
        if finding.get("suggestions"):
            picks.setdefault(str(finding["suggestions"][0]), str(finding.get("category", "")))
    shown = list(picks.items()) if verbose else list(picks.items())[:RECOMMENDATIONS_DEFAULT]
    if not shown:
        return []
    lines = [Text("Top recommendations", style="bold underline")]
    for number, (fix, category) in enumerate(shown, start=1):
        lines.append(Text.assemble(f"{number:>2}. ", fix, (f"  ({category})", "dim")))
    return lines


def _notes(results: dict, verbose: bool) -> list[Text]:
    notes = [("limitation", str(n)) for n in results.get("limitations") or []]
    notes += [("warning", str(n)) for n in results.get("warnings") or []]
    shown = notes if verbose else notes[:NOTES_DEFAULT]
    lines = [Text.assemble((f"{kind}: ", "yellow"), note) for kind, note in shown]
    if len(shown) < len(notes):
        lines.append(Text(f"+ {len(notes) - len(shown)} more limitations/warnings (--verbose)", style="dim"))
    return lines


def _passes(results: dict) -> Text:
    passes = results.get("passes") or []
    plain = next((p.get("step_time_ms") for p in passes if p.get("name") == "plain"), None)
    line = Text.assemble(("Passes: ", "bold"))
    for position, item in enumerate(passes):
        part = f"{item.get('name')} {item.get('status')}"
        if item.get("wall_s") is not None:
            part += f" {format_value(item['wall_s'], 's')}"
        step = item.get("step_time_ms")
        if step is not None:
            part += f", step {format_value(step, 'ms')}"
            if plain and item.get("name") != "plain":
                part += f" ({(step / plain - 1) * 100:+.0f}% vs plain)"
        line.append(("" if position == 0 else " · ") + part)
    return line


def _kernel_table(results: dict) -> Table | None:
    kernels = results.get("top_kernels") or []
    if not kernels:
        return None
    sources = sorted({source_label(str(k.get("source", ""))) for k in kernels})
    table = Table(title=Text(f"Top kernels per step [{', '.join(sources)}]"), title_justify="left", box=None)
    for header in ("kernel", "calls", "total", "mean", "share"):
        table.add_column(header, justify="left" if header == "kernel" else "right")
    for kernel in kernels[:TABLE_ROWS_VERBOSE]:
        table.add_row(Text(short_name(str(kernel.get("name", "")))), Text(format_value(kernel.get("calls_per_step"))),
                      Text(format_value(kernel.get("total_ms"), "ms")), Text(format_value(kernel.get("mean_us"), "us")),
                      Text(format_value(kernel.get("share_pct"), "%")))
    return table


def _layer_table(results: dict) -> Table | Text:
    layers = results.get("layers") or []
    if not layers:
        return Text("Layers: no module ranges in this run (profile with --nvtx-modules)", style="dim")
    sources = sorted({source_label(str(layer.get("source", ""))) for layer in layers})
    table = Table(title=Text(f"Layers by GPU time per step [{', '.join(sources)}]"), title_justify="left", box=None)
    for header in ("layer", "gpu", "kernels", "share"):
        table.add_column(header, justify="left" if header == "layer" else "right")
    for layer in layers[:TABLE_ROWS_VERBOSE]:
        table.add_row(Text(short_name(str(layer.get("name", "")))), Text(format_value(layer.get("gpu_ms"), "ms")),
                      Text(format_value(layer.get("kernels"))), Text(format_value(layer.get("share_pct"), "%")))
    return table


def print_report(results: dict, console: Console, *, verbose: bool = False) -> None:
    """Print the report of one results dict on a rich console."""
    blocks: list = [*_summary(results), *_roofline(results), Text(""), *_findings(results, verbose)]
    recommendations = _recommendations(results, verbose)
    if recommendations:
        blocks += [Text(""), *recommendations]
    notes = _notes(results, verbose)
    if notes:
        blocks += [Text(""), *notes]
    if verbose:
        kernel_table = _kernel_table(results)
        blocks += [Text(""), *([kernel_table] if kernel_table else []), Text(""), _layer_table(results)]
    blocks.append(_passes(results))
    console.print(Group(*blocks), overflow="fold")


def render_terminal(results: dict, *, verbose: bool = False, color: bool | None = None) -> str:
    """The terminal report as a string. color=None colours only when stdout is a terminal and NO_COLOR is
    unset; without colour the text carries no ANSI codes at all."""
    colored = use_color() if color is None else color and not os.environ.get("NO_COLOR")
    buffer = io.StringIO()
    console = Console(file=buffer, width=REPORT_WIDTH, force_terminal=colored, color_system="standard" if colored
                      else None, no_color=not colored, highlight=False, emoji=False, markup=False, soft_wrap=False)
    print_report(results, console, verbose=verbose)
    # Tables pad cells to the full width; trailing blanks only cost the reader a wider copy-paste.
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"
