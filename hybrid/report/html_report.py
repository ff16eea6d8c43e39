"""One self-contained HTML file (inline CSS and SVG, no script, no network) that a colleague can open
offline. Every string from the results (kernel, layer and NVTX names come from the profiled program)
goes through `html.escape`, so a name such as `<img src=x onerror=...>` shows as text. Absolute paths
of the user's machine are cut to their last component unless `include_paths`."""

from __future__ import annotations

import html
import math
import re

from hybrid.report import findings_by_impact, format_value, source_label

# Roofline plot geometry (SVG user units).
PLOT_WIDTH, PLOT_HEIGHT = 720, 420
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 70, 150, 20, 50
POINT_RADIUS_MIN, POINT_RADIUS_MAX = 3.0, 12.0  # radius grows with sqrt of the kernel's time share
ROOF_MARGIN_DECADES = 0.3  # space around the data on the log axes, in decades

_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])(?:/|[A-Za-z]:\\)(?:[^\s/\\\"'<>]+[/\\])+([^\s/\\\"'<>]*)")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1100px;color:#1d232a;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;width:100%;margin:.5em 0}th,td{border-bottom:1px solid #eaeef2;padding:.3em .5em;
text-align:left;vertical-align:top}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
.card{border:1px solid #d0d7de;border-left:6px solid #8c959f;border-radius:6px;padding:.6em 1em;margin:.8em 0}
.card.CRITICAL{border-left-color:#cf222e}.card.SEVERE{border-left-color:#e16f24}.card.MODERATE{border-left-color:#d4a72c}
.badge{font-weight:700;padding:0 .4em;border-radius:4px;background:#eaeef2}.CRITICAL .badge{background:#cf222e;color:#fff}
.SEVERE .badge{background:#e16f24;color:#fff}.MODERATE .badge{background:#d4a72c}
.src{font-size:.85em;color:#0550ae;white-space:nowrap}.src.estimated,.src.spec{color:#8250df}
.muted{color:#57606a}.summary td:first-child{font-weight:600;width:16em}
svg text{font:11px system-ui,sans-serif;fill:#1d232a}
"""


class _Writer:
    """Escapes (and, unless asked otherwise, strips machine paths from) every string it is given."""

    def __init__(self, include_paths: bool) -> None:
        self.include_paths = include_paths

    def text(self, value: object) -> str:
        text = "" if value is None else str(value)
        if not self.include_paths:
            text = _ABSOLUTE_PATH.sub(lambda match: f".../{match.group(1)}", text)
        return html.escape(text, quote=True)

    def value(self, value: object, unit: str = "") -> str:
        return self.text(format_value(value, unit))

    def source(self, source: object) -> str:
        source = str(source or "")
        css = source.split(":", 1)[0] if source else "unknown"
        return f'<span class="src {self.text(css)}">[{self.text(source_label(source) or "unknown")}]</span>'


def _summary(results: dict, w: _Writer) -> str:
    device, workload, timing = results.get("device") or {}, results.get("workload") or {}, results.get("timing") or {}
    primary = (results.get("diagnosis") or {}).get("primary_bottleneck")
    primary_html = "none found"
    if primary:
        primary_html = (f'<span class="{w.text(primary.get("severity"))}"><span class="badge">'
                        f'{w.text(primary.get("severity"))}</span></span> {w.text(primary.get("category"))}: '
                        f'{w.text(primary.get("title"))}, {w.value(primary.get("time_lost_ms"), "ms")}/step '
                        f'({w.value(primary.get("time_lost_pct"), "%")}) {w.source("estimated")}')
    step = w.value(timing.get("step_time_ms"), "ms")
    if timing.get("step_time_std_ms") is not None:
        step += f" ± {w.value(timing['step_time_std_ms'], 'ms')}"
    rows = [
        ("Primary bottleneck", primary_html),
        ("Step time", f"{step} {w.source(timing.get('source'))}"),
        ("GPU busy", (f"{w.value(timing.get('gpu_busy_ms'), 'ms')} ({w.value(timing.get('gpu_util_pct'), '%')} "
                     f"utilization) {w.source(timing.get('source'))}")),
        ("Compute (kernels)", (f"{w.value(timing.get('kernel_time_ms'), 'ms')} "
                              f"({w.value(timing.get('compute_util_pct'), '%')}) {w.source(timing.get('source'))}")),
        ("Device", (f"{w.text(device.get('name') or 'no GPU')}, {w.value(device.get('sm_count'))} SMs "
                   f"{w.source(device.get('source'))}")),
        ("Mode", (f"{w.text(results.get('mode'))}: {w.value(workload.get('steps_measured'))} steps measured after "
                 f"{w.value(workload.get('warmup_steps'))} warmup")),
    ]
    body = "".join(f"<tr><td>{label}</td><td>{cell}</td></tr>" for label, cell in rows)
    return f'<h2>Summary</h2><table class="summary">{body}</table>'


def _log_scale(low: float, high: float, start: float, length: float, invert: bool = False):
    span = math.log10(high) - math.log10(low)

    def place(value: float) -> float:
        offset = (math.log10(value) - math.log10(low)) / span * length
        return start + (length - offset if invert else offset)
    return place


def _finite_positive(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _roofline_svg(results: dict, w: _Writer) -> str:
    peaks = (results.get("device") or {}).get("peaks") or {}
    bandwidth = peaks.get("dram_bytes_per_s")
    compute = {p: v for p, v in (peaks.get("flops_per_s") or {}).items() if _finite_positive(v)}
    roof = results.get("roofline") or {}
    points = [k for k in roof.get("kernels") or []
              if _finite_positive(k.get("arithmetic_intensity")) and _finite_positive(k.get("flops_per_s"))]
    if not _finite_positive(bandwidth) or not compute:
        return '<p class="muted">No roofline: the device peaks are unknown in this mode.</p>'
    ridges = {p: v / bandwidth for p, v in compute.items()}
    xs = [k["arithmetic_intensity"] for k in points] + list(ridges.values())
    ys = [k["flops_per_s"] for k in points] + list(compute.values())
    x_low = 10 ** math.floor(math.log10(min(xs)) - ROOF_MARGIN_DECADES)
    x_high = 10 ** math.ceil(math.log10(max(xs)) + ROOF_MARGIN_DECADES)
    y_low = 10 ** math.floor(math.log10(min(min(ys), x_low * bandwidth)) - ROOF_MARGIN_DECADES)
    y_high = 10 ** math.ceil(math.log10(max(ys)) + ROOF_MARGIN_DECADES)
    inner_w = PLOT_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    inner_h = PLOT_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    px = _log_scale(x_low, x_high, MARGIN_LEFT, inner_w)
    py = _log_scale(y_low, y_high, MARGIN_TOP, inner_h, invert=True)
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {PLOT_WIDTH} {PLOT_HEIGHT}" '
             f'width="{PLOT_WIDTH}" role="img" aria-label="roofline">'),
             "<title>Roofline: achieved FLOP/s against arithmetic intensity (log-log)</title>"]
    for exponent in range(round(math.log10(x_low)), round(math.log10(x_high)) + 1):
        x = px(10 ** exponent)
        parts.append(f'<line x1="{x:.1f}" y1="{MARGIN_TOP}" x2="{x:.1f}" y2="{MARGIN_TOP + inner_h}" stroke="#eaeef2"/>'
                     f'<text x="{x:.1f}" y="{MARGIN_TOP + inner_h + 14}" text-anchor="middle">1e{exponent}</text>')
    for exponent in range(round(math.log10(y_low)), round(math.log10(y_high)) + 1):
        y = py(10 ** exponent)
        parts.append(f'<line x1="{MARGIN_LEFT}" y1="{y:.1f}" x2="{MARGIN_LEFT + inner_w}" y2="{y:.1f}" stroke="#eaeef2"/>'
                     f'<text x="{MARGIN_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">1e{exponent}</text>')
    parts.append(f'<text x="{MARGIN_LEFT + inner_w / 2}" y="{PLOT_HEIGHT - 12}" text-anchor="middle">'
                 f'arithmetic intensity (FLOP/byte of DRAM traffic)</text>'
                 f'<text transform="translate(16 {MARGIN_TOP + inner_h / 2}) rotate(-90)" text-anchor="middle">'
                 f'FLOP/s</text>')
    top_peak = max(compute.values())
    parts.append(f'<line x1="{px(x_low):.1f}" y1="{py(x_low * bandwidth):.1f}" x2="{px(top_peak / bandwidth):.1f}" '
                 f'y2="{py(top_peak):.1f}" stroke="#0550ae" stroke-width="2"><title>DRAM roof: '
                 f'{w.value(bandwidth, "B/s")} [spec]</title></line>'
                 f'<text x="{px(x_low) + 4:.1f}" y="{py(x_low * bandwidth) - 6:.1f}" fill="#0550ae">'
                 f'DRAM {w.value(bandwidth, "B/s")}</text>')
    for precision, peak in sorted(compute.items(), key=lambda item: item[1]):
        ridge_x, roof_y = px(ridges[precision]), py(peak)
        parts.append(f'<line x1="{ridge_x:.1f}" y1="{roof_y:.1f}" x2="{MARGIN_LEFT + inner_w}" y2="{roof_y:.1f}" '
                     f'stroke="#57606a" stroke-width="1.5"/>'
                     f'<text x="{MARGIN_LEFT + inner_w + 4}" y="{roof_y + 4:.1f}">{w.text(precision)} '
                     f'{w.value(peak, "FLOP/s")}</text>'
                     f'<circle cx="{ridge_x:.1f}" cy="{roof_y:.1f}" r="3" fill="#57606a"><title>ridge point '
                     f'{w.text(precision)}: {w.value(ridges[precision], "FLOP/B")} [spec]</title></circle>')
    longest = max((k.get("time_ms") or 0.0 for k in points), default=0.0) or 1.0
    for kernel in sorted(points, key=lambda k: -(k.get("time_ms") or 0.0)):
        parts.append(_kernel_point(kernel, px(kernel["arithmetic_intensity"]), py(kernel["flops_per_s"]),
                                   longest, w))
    parts.append(_legend(MARGIN_LEFT + 10, MARGIN_TOP + 10))
    parts.append("</svg>")
    return "".join(parts)


def _kernel_point(kernel: dict, x: float, y: float, longest: float, w: _Writer) -> str:
    share = max(kernel.get("time_ms") or 0.0, 0.0) / longest
    radius = POINT_RADIUS_MIN + (POINT_RADIUS_MAX - POINT_RADIUS_MIN) * math.sqrt(share)
    source = str(kernel.get("source", ""))
    tooltip = (f"<title>{w.text(kernel.get('name'))}&#10;AI {w.value(kernel.get('arithmetic_intensity'), 'FLOP/B')}"
               f"&#10;{w.value(kernel.get('flops_per_s'), 'FLOP/s')}&#10;DRAM {w.value(kernel.get('dram_bytes'), 'B')}"
               f"&#10;time {w.value(kernel.get('time_ms'), 'ms')}/step&#10;[{w.text(source_label(source))}]</title>")
    if source.startswith("measured:"):  # measured: filled circle
        return (f'<circle class="kernel measured" cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="#cf222e" '
                f'fill-opacity="0.7">{tooltip}</circle>')
    # estimated: hollow diamond, so it never reads as a measurement
    d = radius * 1.3
    return (f'<polygon class="kernel estimated" points="{x:.1f},{y - d:.1f} {x + d:.1f},{y:.1f} {x:.1f},{y + d:.1f} '
            f'{x - d:.1f},{y:.1f}" fill="none" stroke="#8250df" stroke-width="2">{tooltip}</polygon>')


def _legend(x: float, y: float) -> str:
    return (f'<circle cx="{x}" cy="{y}" r="5" fill="#cf222e" fill-opacity="0.7"/>'
            f'<text x="{x + 10}" y="{y + 4}">kernel, measured (ncu)</text>'
            f'<polygon points="{x},{y + 12} {x + 6},{y + 18} {x},{y + 24} {x - 6},{y + 18}" fill="none" '
            f'stroke="#8250df" stroke-width="2"/><text x="{x + 10}" y="{y + 22}">kernel, estimated</text>')


def _roofline(results: dict, w: _Writer) -> str:
    roof = results.get("roofline") or {}
    facts = (f"<p>{w.text(roof.get('bound'))}-bound · arithmetic intensity "
             f"{w.value(roof.get('arithmetic_intensity'), 'FLOP/B')} · ridge point "
             f"{w.value(roof.get('ridge_point'), 'FLOP/B')} {w.text(roof.get('precision') or '')} · "
             f"{w.value(roof.get('achieved_pct_of_attainable'), '%')} of attainable · DRAM "
             f"{w.value(roof.get('memory_bw_pct_of_peak'), '%')} of peak · compute "
             f"{w.value(roof.get('compute_pct_of_peak'), '%')} of peak {w.source(roof.get('source'))}</p>")
    return f"<h2>Roofline</h2>{facts}{_roofline_svg(results, w)}"


def _card(index: int, finding: dict, w: _Writer) -> str:
    severity = w.text(finding.get("severity"))
    evidence = "".join(f"<tr><td>{w.text(e.get('label'))}</td><td class=\"num\">{w.value(e.get('value'), e.get('unit', ''))}"
                       f"</td><td>{w.source(e.get('source'))}</td></tr>" for e in finding.get("evidence") or [])
    fixes = "".join(f"<li>{w.text(fix)}</li>" for fix in finding.get("suggestions") or [])
    not_measured = '<p class="muted">Not measured in this run.</p>' if finding.get("not_measured") else ""
    return (f'<div class="card {severity}"><h3>{index}. <span class="badge">{severity}</span> '
            f'{w.text(finding.get("category"))}: {w.text(finding.get("title"))}</h3>'
            f'<p>time lost: {w.value(finding.get("time_lost_ms"), "ms")}/step '
            f'({w.value(finding.get("time_lost_pct"), "%")}) {w.source("estimated")} · id '
            f'<code>{w.text(finding.get("id"))}</code></p>{not_measured}'
            + (f"<table>{evidence}</table>" if evidence else "")
            + f'<p>{w.text(finding.get("explanation"))}</p>' + (f"<ul>{fixes}</ul>" if fixes else "") + "</div>")


def _findings(results: dict, w: _Writer) -> str:
    findings = findings_by_impact(results)
    if not findings:
        return "<h2>Bottlenecks</h2><p>None detected.</p>"
    return f"<h2>Bottlenecks ({len(findings)})</h2>" + "".join(_card(i, f, w) for i, f in enumerate(findings, 1))


def _table(title: str, headers: list[tuple[str, bool]], rows: list[list[str]]) -> str:
    head = "".join(f'<th class="num">{h}</th>' if numeric else f"<th>{h}</th>" for h, numeric in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{cell}</td>' if numeric else f"<td>{cell}</td>"
                                    for cell, (_, numeric) in zip(row, headers)) + "</tr>" for row in rows)
    return f"<h2>{title}</h2><table><tr>{head}</tr>{body}</table>"


def _kernels(results: dict, w: _Writer) -> str:
    kernels = results.get("top_kernels") or []
    if not kernels:
        return "<h2>Top kernels</h2><p class=\"muted\">No kernel timeline in this mode.</p>"
    rows = [[f"<code>{w.text(k.get('name'))}</code>", w.value(k.get("calls_per_step")), w.value(k.get("total_ms"), "ms"),
             w.value(k.get("mean_us"), "us"), w.value(k.get("share_pct"), "%"), w.source(k.get("source"))]
            for k in kernels]
    return _table("Top kernels (per step)", [("kernel", False), ("calls", True), ("total", True), ("mean", True),
                                             ("share", True), ("source", False)], rows)


def _layers(results: dict, w: _Writer) -> str:
    layers = results.get("layers") or []
    if not layers:
        return ("<h2>Layers</h2><p class=\"muted\">No module ranges in this run (profile with "
                "<code>--nvtx-modules</code>).</p>")
    rows = [[f"<code>{w.text(layer.get('name'))}</code>", w.value(layer.get("gpu_ms"), "ms"), w.value(layer.get("kernels")),
             w.value(layer.get("share_pct"), "%"), w.source(layer.get("source"))] for layer in layers]
    return _table("Layers (GPU time per step)", [("layer", False), ("GPU time", True), ("kernels", True),
                                                 ("share", True), ("source", False)], rows)


def _notes(results: dict, w: _Writer) -> str:
    items = [f"<li><b>limitation:</b> {w.text(n)}</li>" for n in results.get("limitations") or []]
    items += [f"<li><b>warning:</b> {w.text(n)}</li>" for n in results.get("warnings") or []]
    return f"<h2>Limitations and warnings</h2><ul>{''.join(items)}</ul>" if items else ""


def _provenance(results: dict, w: _Writer) -> str:
    workload = results.get("workload") or {}
    command = workload.get("command")
    command_text = " ".join(map(str, command)) if isinstance(command, (list, tuple)) else command
    tools = ", ".join(f"{w.text(name)} {w.text(version if version is not None else 'absent')}"
                      for name, version in (results.get("tools") or {}).items())
    passes = [[w.text(p.get("name")), w.text(p.get("status")), w.value(p.get("wall_s"), "s"),
               w.value(p.get("step_time_ms"), "ms"), w.text(p.get("message"))] for p in results.get("passes") or []]
    return (f"<h2>Provenance</h2><table class=\"summary\"><tr><td>Command</td><td><code>{w.text(command_text)}</code>"
            f"</td></tr><tr><td>Mode</td><td>{w.text(results.get('mode'))}</td></tr><tr><td>Step source</td><td>"
            f"{w.text(workload.get('step_source'))}</td></tr><tr><td>Tools</td><td>{tools}</td></tr><tr><td>"
            f"Schema version</td><td>{w.text(results.get('schema_version'))}</td></tr></table>"
            + _table("Passes", [("pass", False), ("status", False), ("wall time", True), ("step time", True),
                                ("message", False)], passes))


def render_html(results: dict, *, include_paths: bool = False) -> str:
    """The whole report as one HTML document."""
    w = _Writer(include_paths)
    device = (results.get("device") or {}).get("name") or "no GPU"
    title = f"hybrid report: {device}, {results.get('mode')}"
    body = "".join([_summary(results, w), _roofline(results, w), _findings(results, w), _kernels(results, w),
                    _layers(results, w), _notes(results, w), _provenance(results, w)])
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{w.text(title)}</title><style>{CSS}</style></head><body><h1>{w.text(title)}</h1>{body}"
            "</body></html>\n")
