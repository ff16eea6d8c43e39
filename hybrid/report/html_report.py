"""One self-contained HTML file (inline CSS and SVG, no script, no network) that a colleague can open
offline. Every string from the results (kernel, layer and NVTX names come from the profiled program)
has its control characters escaped (safe_text) and goes through `html.escape`, so a name such as
`<img src=x onerror=...>` shows as text. Absolute paths of the user's machine are cut to their last
component unless `include_paths`."""

from __future__ import annotations

from hybrid.report import waterfall
from hybrid.report.common import (
    findings_by_impact,
    instead_of,
    metric_source_counts,
    overhead_noise,
    through_text,
)
from hybrid.report.compare import compare_lines
from hybrid.report.html_roofline import roofline_section
from hybrid.report.html_timeline import timeline_css, timeline_svg
from hybrid.report.html_writer import HtmlWriter
from hybrid.report.kernel_labels import launch_text
from hybrid.report.notes import reading_notes
from hybrid.report.safe_text import escape_strings
from hybrid.report.units import format_change_pct, noun
from hybrid.report.verified import figure_note, range_note, replay_error_line, skipped_line, verify_line
from hybrid.report.views import artifact_views

# Second line of defence behind escaping: should a name ever reach the page as markup, the browser still
# runs no script (inline handlers included) and fetches nothing; the page needs only its inline <style>.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'"


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;\
max-width:1100px;color:#1d232a;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;width:100%;margin:.5em 0}\
th,td{border-bottom:1px solid #eaeef2;padding:.3em .5em;
text-align:left;vertical-align:top}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.text{overflow-wrap:anywhere}
code{font:12px ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
.card{border:1px solid #d0d7de;border-left:6px solid #8c959f;border-radius:6px;padding:.6em 1em;margin:.8em 0}
.card.CRITICAL{border-left-color:#cf222e}.card.SEVERE{border-left-color:#e16f24}.card.MODERATE{border-left-color:#d4a72c}
.badge{font-weight:700;padding:0 .4em;border-radius:4px;background:#eaeef2}\
.CRITICAL .badge{background:#cf222e;color:#fff}
.SEVERE .badge{background:#e16f24;color:#fff}.MODERATE .badge{background:#d4a72c}
.src{font-size:.85em;color:#0550ae;white-space:nowrap}.src.estimated,.src.spec{color:#8250df}
.muted{color:#57606a}.summary td:first-child{font-weight:600;width:16em}
.first{border:1px solid #d4a72c;background:#fff8c5;border-radius:6px;padding:.4em 1em;margin:.8em 0}
.first li{margin:.2em 0}.delta-warning{color:#cf222e;font-weight:700}
svg text{font:11px system-ui,sans-serif;fill:#1d232a}svg text.dram{fill:#0550ae}svg text.l2{fill:#1a7f37}
"""


def _summary(results: dict, w: HtmlWriter) -> str:
    device, workload, timing = (
        results.get("device") or {},
        results.get("workload") or {},
        results.get("timing") or {},
    )
    primary = (results.get("diagnosis") or {}).get("primary_bottleneck")
    primary_html = "none found"
    if primary:
        primary_html = (
            f'<span class="{w.text(primary.get("severity"))}"><span class="badge">'
            f"{w.text(primary.get('severity'))}</span></span> {w.text(primary.get('category'))}: "
            f"{w.text(primary.get('title'))}, {_lost(primary, timing, w)}"
        )
    step = w.value(timing.get("step_time_ms"), "ms")
    if timing.get("step_time_std_ms") is not None:
        step += f" ± {w.value(timing['step_time_std_ms'], 'ms')}"
    if timing.get("step_time_median_ms") is not None:
        step += f" (median {w.value(timing['step_time_median_ms'], 'ms')})"
    idle = ", ".join(
        f"{w.text(cause)} {w.value(ms, 'ms')}"
        for cause, ms in sorted(
            (timing.get("idle_breakdown_ms") or {}).items(), key=lambda item: -(item[1] or 0.0)
        )
        if ms
    )
    counts = metric_source_counts(results)
    batch = f", batch {w.value(workload['batch_size'])}" if workload.get("batch_size") else ""
    rows = [
        ("Primary bottleneck", primary_html),
        ("Step time", f"{step} {w.source(timing.get('source'))}"),
        (
            "GPU busy",
            (
                f"{w.value(timing.get('gpu_busy_ms'), 'ms')} ({w.value(timing.get('gpu_util_pct'), '%')} "
                f"utilization) {w.source(timing.get('source'))}"
            ),
        ),
        (
            "GPU idle",
            (
                f"{w.value(timing.get('gpu_idle_ms'), 'ms')}"
                + (f" ({idle})" if idle else "")
                + f" {w.source(timing.get('source'))}"
            ),
        ),
        (
            "Device",
            (
                f"{w.text(device['name'])}, {w.value(device.get('sm_count'))} SMs "
                f"{w.source(device.get('source'))}"
                if device.get("name")
                else "no GPU: GPU analysis was not possible"
            ),
        ),
        (
            "Mode",
            (
                f"{w.text(results.get('mode'))}: {w.value(workload.get('steps_measured'))} "
                f"{noun('steps', workload.get('steps_measured'))} measured after "
                f"{w.value(workload.get('warmup_steps'))} warmup{batch}"
                + (
                    f"; steps found by {w.text(workload['step_source'])}"
                    if workload.get("step_source")
                    else ""
                )
            ),
        ),
        (
            "Metrics by source",
            ", ".join(f"{w.value(n)} {w.source(source)}" for source, n in counts.items()) or "none",
        ),
    ]
    if timing.get("gpu_busy_ms") is None:  # no device timeline: rows of n/a say nothing
        rows = [row for row in rows if row[0] not in ("GPU busy", "GPU idle")]
    body = "".join(f"<tr><td>{label}</td><td>{cell}</td></tr>" for label, cell in rows)
    return f'<h2>Summary</h2><table class="summary">{body}</table>'


def _lost(finding: dict, timing: dict, w: HtmlWriter) -> str:
    """'5.17 ms/step at the plain step (22.4%) [estimated] · 10.2 ms profiled' where findings are
    weighed at the plain step; '10.2 ms/step (33.7%) [estimated] · 5.17 ms at the plain step' otherwise."""
    plain_ms = finding.get("time_lost_baseline_ms")
    if timing.get("weighed_at_plain_step") and plain_ms is not None:
        return (
            f"{w.value(plain_ms, 'ms')}/step at the plain step "
            f"({w.value(finding.get('time_lost_baseline_pct'), '%')})"
            f" {w.source('estimated')} · {w.value(finding.get('time_lost_ms'), 'ms')} profiled"
        )
    return (
        f"{w.value(finding.get('time_lost_ms'), 'ms')}/step ({w.value(finding.get('time_lost_pct'), '%')}) "
        f"{w.source('estimated')}"
        + (f" · {w.value(plain_ms, 'ms')} at the plain step" if plain_ms is not None else "")
    )


def _card(index: int, finding: dict, w: HtmlWriter, timing: dict, numbers: dict[str, int]) -> str:
    severity = w.text(finding.get("severity"))
    alternative = instead_of(finding, numbers)
    # Numbers align right and stay on one line; text values (operator lists, the replayed fix) wrap.
    evidence = "".join(
        f"<tr><td>{w.text(e.get('label'))}</td>"
        f'<td class="{"num" if isinstance(e.get("value"), (int, float)) else "text"}">'
        f"{w.value(e.get('value'), e.get('unit', ''))}"
        f"</td><td>{w.source(e.get('source'))}</td></tr>"
        for e in finding.get("evidence") or []
    )
    fixes = "".join(f"<li>{w.text(fix)}</li>" for fix in finding.get("suggestions") or [])
    return (
        f'<div class="card {severity}"><h3>{index}. <span class="badge">{severity}</span> '
        f"{w.text(finding.get('category'))}: {w.text(finding.get('title'))}"
        + (f' <span class="muted">({w.text(alternative)})</span>' if alternative else "")
        + "</h3>"
        + _verified(finding, w)
        + f"<p>time lost: {_lost(finding, timing, w)} · id <code>{w.text(finding.get('id'))}</code>"
        + "".join(
            f'<br><span class="muted">{note[0]}: {w.text(note[1])}</span>'
            for note in (figure_note(finding), range_note(finding, timing))
            if note is not None
        )
        + "</p>"
        + (f"<table>{evidence}</table>" if evidence else "")
        + _callsites(finding, w)
        + f"<p>{w.text(finding.get('explanation'))}</p>"
        + (f"<ul>{fixes}</ul>" if fixes else "")
        + "</div>"
    )


def _verified(finding: dict, w: HtmlWriter) -> str:
    """What --verify realized, before the predicted figures."""
    line = verify_line(finding)
    return f'<p class="verified"><b>{w.text(line)}</b></p>' if line else ""


def _callsites(finding: dict, w: HtmlWriter) -> str:
    """The finding's top user lines: 'at train.py:42 (63%) total += loss.item()', full paths with
    include_paths."""
    items = "".join(_callsite_item(c, w) for c in finding.get("callsites") or [])
    if items:
        return f'<ul class="callsites">{items}</ul>'
    reason = finding.get("callsite_reason")
    return f'<p class="callsites">{w.text(reason)}</p>' if reason else ""


def _callsite_item(site: dict, w: HtmlWriter) -> str:
    share = f"({w.value(site.get('share_pct'), '%')})"
    if site.get("file") is None:  # only the module range its kernels were launched in
        return f"<li>in module <code>{w.text(site.get('module'))}</code> {share}</li>"
    file = site.get("path") if w.include_paths and site.get("path") else site.get("file")
    module = f" in module <code>{w.text(site['module'])}</code>" if site.get("module") else ""
    through = through_text(site)
    return (
        f"<li>at <code>{w.text(file)}:{w.text(site.get('line'))}</code> {share} "
        f"<code>{w.text(site.get('source_line') or site.get('function') or '')}</code>{module}"
        + (f'<br><span class="muted">{w.text(through)}</span>' if through else "")
        + "</li>"
    )


def _findings(results: dict, w: HtmlWriter) -> str:
    findings = findings_by_impact(results)
    if not findings:
        return (
            "<h2>Bottlenecks</h2><p>None detected in what this run measured (see the limitations).</p>"
            + _below_floor(results, w)
        )
    timing = results.get("timing") or {}
    numbers = {str(f.get("id")): n for n, f in enumerate(findings, start=1)}
    return (
        f"<h2>Bottlenecks ({len(findings)})</h2>"
        + "".join(_card(i, f, w, timing, numbers) for i, f in enumerate(findings, 1))
        + _below_floor(results, w)
        + "".join(
            f"<p>{w.text(line)}</p>" for line in (replay_error_line(results), skipped_line(results)) if line
        )
    )


def _below_floor(results: dict, w: HtmlWriter) -> str:
    below = (results.get("diagnosis") or {}).get("below_floor") or []
    if not below:
        return ""
    names = ", ".join(
        f"<code>{w.text(b.get('id'))}</code> {w.value(b.get('weighed_lost_ms'), 'ms')}" for b in below
    )
    return (
        f'<p class="muted">Left out: the time a fix would save is under the rule\'s floor ({names}); '
        "results.json: <code>diagnosis.below_floor</code>.</p>"
    )


def _table(title: str, headers: list[tuple[str, bool]], rows: list[list[str]]) -> str:
    head = "".join(f'<th class="num">{h}</th>' if numeric else f"<th>{h}</th>" for h, numeric in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{cell}</td>' if numeric else f"<td>{cell}</td>"
            for cell, (_, numeric) in zip(row, headers, strict=False)
        )
        + "</tr>"
        for row in rows
    )
    return f"<h2>{title}</h2><table><tr>{head}</tr>{body}</table>"


def _kernels(results: dict, w: HtmlWriter) -> str:
    kernels = results.get("top_kernels") or []
    if not kernels:
        return '<h2>Top kernels</h2><p class="muted">No kernel timeline in this mode.</p>'
    launches = [launch_text(k) for k in kernels]
    launch = any(launches)  # the configuration that took the most time, as CUDA writes a launch
    rows = [
        [
            f"<code>{w.text(k.get('name'))}</code>",
            *([f"<code>{w.text(text)}</code>"] if launch else []),
            w.value(k.get("calls_per_step")),
            w.value(k.get("total_ms_per_step"), "ms"),
            w.value(k.get("mean_us"), "us"),
            w.value(k.get("share_pct"), "%"),
            w.source(k.get("source")),
        ]
        for k, text in zip(kernels, launches, strict=True)
    ]
    headers = [
        ("kernel", False),
        *([("&lt;&lt;&lt;grid, block&gt;&gt;&gt;", False)] if launch else []),
        ("calls", True),
        ("total", True),
        ("mean", True),
        ("share of kernel time", True),
        ("source", False),
    ]
    return _table("Top kernels (per step)", headers, rows)


def _ranks(results: dict, w: HtmlWriter) -> str:
    """Multi-process runs: every rank side by side, the straggler marked, before the representative
    rank's detail."""
    job = results.get("job")
    if not job:
        return ""
    summaries = results.get("ranks") or {}
    straggler = (job.get("straggler") or {}).get("rank")
    rows = []
    for rank, row in sorted((job.get("per_rank") or {}).items(), key=lambda item: int(item[0])):
        primary = (summaries.get(rank) or {}).get("primary_bottleneck") or {}
        label = f"rank {w.text(rank)}" + (" (straggler)" if str(straggler) == str(rank) else "")
        rows.append(
            [
                label,
                w.value(row.get("step_time_ms"), "ms"),
                w.value(row.get("compute_ms"), "ms"),
                w.value(row.get("comm_ms"), "ms"),
                w.value(row.get("exposed_comm_ms"), "ms"),
                w.value(row.get("overlap_pct"), "%"),
                w.value(row.get("wait_ms"), "ms"),
                w.text((primary.get("title") if isinstance(primary, dict) else primary) or "none"),
            ]
        )
    title = (
        f"Ranks side by side ({w.text(job.get('world_size'))} ranks, "
        f"{w.text(job.get('backend') or 'backend unknown')};"
        f" per step, {w.source(job.get('comm_source'))})"
    )
    return _table(
        title,
        [
            ("rank", False),
            ("step", True),
            ("compute", True),
            ("communication", True),
            ("exposed", True),
            ("overlap", True),
            ("waiting for peers", True),
            ("rank's primary finding", False),
        ],
        rows,
    )


def _roofline_kernels(results: dict, w: HtmlWriter) -> str:
    kernels = sorted(
        (results.get("roofline") or {}).get("kernels") or [], key=lambda k: -(k.get("time_ms") or 0.0)
    )
    if not kernels:
        return ""
    rows = [
        [
            f"<code>{w.text(k.get('name'))}</code>",
            w.value(k.get("time_ms"), "ms"),
            w.value(k.get("ai"), "FLOP/B"),
            w.value(k.get("l2_ai"), "FLOP/B"),
            f"{w.value(k.get('flops_per_s'), 'FLOP/s')} {w.text(k.get('precision') or '')}",
            w.value(k.get("bytes_per_s"), "B/s"),
            w.text(k.get("bound")),
            w.value(k.get("achieved_pct_of_attainable"), "%"),
            w.source(k.get("source")),
        ]
        for k in kernels
    ]
    return _table(
        "Roofline kernels",
        [
            ("kernel", False),
            ("time", True),
            ("AI (DRAM)", True),
            ("AI (L2)", True),
            ("achieved", True),
            ("DRAM", True),
            ("bound", False),
            ("of attainable", True),
            ("source", False),
        ],
        rows,
    )


def _layers(results: dict, w: HtmlWriter) -> str:
    layers = results.get("layers") or []
    if not layers:
        return (
            '<h2>Layers</h2><p class="muted">No module ranges in this run (profile with '
            "<code>--nvtx-modules</code>).</p>"
        )
    rows = [
        [
            f"<code>{w.text(layer.get('name'))}</code>",
            w.value(layer.get("gpu_ms"), "ms"),
            w.value(layer.get("kernels")),
            w.value(layer.get("share_of_step_pct"), "%"),
            w.source(layer.get("source")),
        ]
        for layer in layers
    ]
    return _table(
        "Layers (GPU time per step, forward)",
        [("layer", False), ("GPU time", True), ("kernels", True), ("share of step", True), ("source", False)],
        rows,
    )


def _metrics(results: dict, w: HtmlWriter) -> str:
    metrics = results.get("metrics") or {}
    if not metrics:
        return ""

    def shown(m: dict) -> str:  # a text value as it is, a number with its unit
        value = m.get("value")
        return w.text(value) if isinstance(value, str) else w.value(value, m.get("unit", ""))

    rows = "".join(
        f'<tr><td><code>{w.text(name)}</code></td><td class="num">{shown(m)}'
        f"</td><td>{w.source(m.get('source'))}</td></tr>"
        for name, m in metrics.items()
    )
    return (
        f"<h2>Metrics</h2><details><summary>{len(metrics)} metrics</summary><table>{rows}</table></details>"
    )


def _pass_step(item: dict, w: HtmlWriter) -> tuple[str, str]:
    """Step time and what it says: overhead against the plain pass, or ncu's replay cost."""
    step = item.get("step_time_ms")
    if step is None:
        return "n/a", ""
    if item.get("name") == "ncu":
        # ncu serializes and replays each profiled kernel, so its step time is the cost of the pass.
        return w.value(step, "ms"), "kernel replay, not overhead"
    if item.get("name") == "plain" or item.get("overhead_pct") is None:
        return w.value(step, "ms"), ""
    return w.value(
        step, "ms"
    ), f"{format_change_pct(item['overhead_pct'])} vs the plain pass{overhead_noise(item)}"


def _first_notes(results: dict, w: HtmlWriter) -> str:
    """The notes that change the reading, above everything else."""
    items = [
        f"<li><b>{w.text(n.kind)}:</b> {w.text(n.text)}</li>"
        for n in reading_notes(results)
        if n.changes_reading
    ]
    return f'<div class="first"><b>Read this first</b><ul>{"".join(items)}</ul></div>' if items else ""


def _notes(results: dict, w: HtmlWriter) -> str:
    items = [
        f"<li><b>{w.text(n.kind)}:</b> {w.text(n.text)}</li>"
        for n in reading_notes(results)
        if not n.changes_reading
    ]
    return f"<h2>Limitations</h2><ul>{''.join(items)}</ul>" if items else ""


def _views(results: dict, w: HtmlWriter) -> str:
    views = artifact_views(results, None)
    if not views:
        return ""
    rows = "".join(
        f"<tr><td>{w.text(what)}</td><td><code>{w.text(command)}</code></td></tr>" for what, command in views
    )
    return (
        '<h2>Open the raw views</h2><p class="muted">From the run directory:</p>'
        f'<table class="summary">{rows}</table>'
    )


def _provenance(results: dict, w: HtmlWriter) -> str:
    workload = results.get("workload") or {}
    command = workload.get("command")
    command_text = " ".join(map(str, command)) if isinstance(command, (list, tuple)) else command
    tools = ", ".join(
        f"{w.text(name)} {w.text(version if version is not None else 'absent')}"
        for name, version in (results.get("tools") or {}).items()
    )
    passes = [
        [
            w.text(p.get("name")),
            w.text(p.get("status")),
            w.value(p.get("wall_s"), "s"),
            *_pass_step(p, w),
            w.text(p.get("message")),
        ]
        for p in results.get("passes") or []
    ]
    return (
        f'<h2>Provenance</h2><table class="summary"><tr><td>Command</td>'
        f"<td><code>{w.text(command_text)}</code>"
        f"</td></tr><tr><td>Mode</td><td>{w.text(results.get('mode'))}</td></tr><tr><td>Step source</td><td>"
        f"{w.text(workload.get('step_source'))}</td></tr><tr><td>Tools</td><td>{tools}</td></tr><tr><td>"
        f"Schema version</td><td>{w.text(results.get('schema_version'))}</td></tr></table>"
        + _table(
            "Passes",
            [
                ("pass", False),
                ("status", False),
                ("wall time", True),
                ("step time", True),
                ("overhead", False),
                ("message", False),
            ],
            passes,
        )
    )


def _page(title: str, body: str, w: HtmlWriter) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
        f"<title>{w.text(title)}</title><style>{CSS}{timeline_css()}</style></head><body><h1>{w.text(title)}</h1>{body}"
        "</body></html>\n"
    )


def render_html(results: dict, *, include_paths: bool = False) -> str:
    """The whole report as one HTML document."""
    results = escape_strings(results)
    w = HtmlWriter(include_paths)
    device = (results.get("device") or {}).get("name") or "no GPU"
    title = f"hybrid report: {device}, {results.get('mode')}"
    body = "".join(
        [
            _first_notes(results, w),
            _summary(results, w),
            _ranks(results, w),
            roofline_section(results, w),
            _findings(results, w),
            waterfall.html_block(results),
            timeline_svg(results, w.text),
            _kernels(results, w),
            _layers(results, w),
            _roofline_kernels(results, w),
            _notes(results, w),
            _views(results, w),
            _metrics(results, w),
            _provenance(results, w),
        ]
    )
    return _page(title, body, w)


def render_timeline_html(results: dict) -> str:
    """The one-step timeline alone on a page (for the README's screenshot)."""
    results = escape_strings(results)
    w = HtmlWriter(False)
    return _page(
        f"hybrid: one step on {(results.get('device') or {}).get('name') or 'no GPU'}",
        timeline_svg(results, w.text),
        w,
    )


def render_compare_html(
    diff: dict, labels: tuple[str, str] = ("A", "B"), *, include_paths: bool = False
) -> str:
    """The comparison of two runs (hybrid.report.compare) as one HTML page: the lines of the text comparison,
    laid out as tables (what changed, findings by status, top kernels)."""
    w = HtmlWriter(include_paths)
    warnings, summary, findings, kernels, notes = [], [], [], [], []
    for kind, text in compare_lines(diff):
        if kind == "warning":
            warnings.append(f'<p class="delta-warning">{w.text(text)}</p>')
        elif kind == "item":
            label, _, rest = text.partition(": ")
            summary.append(f"<tr><td>{w.text(label)}</td><td>{w.text(rest)}</td></tr>")
        elif kind == "finding":
            status, _, rest = text.partition(": ")
            findings.append(f"<tr><td><b>{w.text(status)}</b></td><td>{w.text(rest)}</td></tr>")
        elif kind == "kernel":
            name, _, change = text.strip().rpartition(": ")
            kernels.append(
                f'<tr><td><code>{w.text(name)}</code></td><td class="num">{w.text(change)}</td></tr>'
            )
        elif kind == "note":
            notes.append(f'<p class="muted">{w.text(text)}</p>')
    body = (
        f"<p>A (baseline): <code>{w.text(labels[0])}</code><br>"
        f"B (candidate): <code>{w.text(labels[1])}</code></p>"
        + "".join(warnings)
        + f'<table class="summary">{"".join(summary)}</table>'
        + (f'<h2>Findings</h2><table class="summary">{"".join(findings)}</table>' if findings else "")
        + (
            f"<h2>Top kernels (time per step, A -> B)</h2><table>{''.join(kernels)}</table>"
            if kernels
            else ""
        )
        + "".join(notes)
    )
    return _page("hybrid compare", body, w)
