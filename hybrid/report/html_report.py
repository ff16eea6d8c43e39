"""One self-contained HTML file (inline CSS and SVG, no script, no network) that a colleague can open
offline. Every string from the results (kernel, layer and NVTX names come from the profiled program)
has its control characters escaped (safe_text) and goes through `html.escape`, so a name such as
`<img src=x onerror=...>` shows as text. Absolute paths of the user's machine are cut to their last
component unless `include_paths`."""

from __future__ import annotations

import html
import math
import re

from hybrid.report import waterfall
from hybrid.report.common import (
    compute_peaks,
    findings_by_impact,
    format_value,
    metric_source_counts,
    overhead_noise,
    peak,
    roofline_vs_peaks,
    source_label,
)
from hybrid.report.compare import compare_lines
from hybrid.report.html_timeline import timeline_css, timeline_svg
from hybrid.report.kernel_labels import launch_text
from hybrid.report.notes import reading_notes
from hybrid.report.safe_text import escape_controls, escape_strings
from hybrid.report.units import format_change_pct, noun
from hybrid.report.verified import figure_note, replay_error_line, skipped_line, verify_line
from hybrid.report.views import artifact_views

# Roofline plot geometry (SVG user units).
PLOT_WIDTH, PLOT_HEIGHT = 720, 420
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 70, 150, 20, 50
LABEL_CHAR_PX = 6.5  # mean advance of an 11px system-ui character
POINT_RADIUS_MIN, POINT_RADIUS_MAX = 3.0, 12.0  # radius grows with sqrt of the kernel's time share
ROOF_LABEL_GAP = 13  # least vertical distance between roof labels: one line of the 11px SVG font
ROOF_MARGIN_DECADES = 0.3  # space around the data on the log axes, in decades

# Second line of defence behind escaping: should a name ever reach the page as markup, the browser still
# runs no script (inline handlers included) and fetches nothing; the page needs only its inline <style>.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'"

_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])(?:/|[A-Za-z]:\\)(?:[^\s/\\\"'<>]+[/\\])+([^\s/\\\"'<>]*)")

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


class _Writer:
    """Escapes (and, unless asked otherwise, strips machine paths from) every string it is given."""

    def __init__(self, include_paths: bool) -> None:
        self.include_paths = include_paths

    def text(self, value: object) -> str:
        text = escape_controls("" if value is None else str(value))
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


def _log_scale(low: float, high: float, start: float, length: float, invert: bool = False):
    span = math.log10(high) - math.log10(low)

    def place(value: float) -> float:
        offset = (math.log10(value) - math.log10(low)) / span * length
        return start + (length - offset if invert else offset)

    return place


def _finite_positive(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _roofline_svg(results: dict, w: _Writer) -> str:
    dram = peak(results, "dram_bytes_per_s")
    compute_entries = compute_peaks(results)
    compute = {precision: float(entry["value"]) for precision, entry in compute_entries.items()}
    if dram is None or not compute:
        return '<p class="muted">No roofline: the device peaks are unknown in this mode.</p>'
    bandwidth = float(dram["value"])
    points = plotted_kernels(results)
    layers = plotted_layers(results)
    roof = results.get("roofline") or {}
    aggregate = (
        roof
        if _finite_positive(roof.get("arithmetic_intensity")) and _finite_positive(roof.get("flops_per_s"))
        else None
    )
    placed = points + layers
    xs = (
        [k["ai"] for k in placed]
        + [v / bandwidth for v in compute.values()]
        + ([aggregate["arithmetic_intensity"]] if aggregate else [])
    )
    ys = (
        [k["flops_per_s"] for k in placed]
        + list(compute.values())
        + ([aggregate["flops_per_s"]] if aggregate else [])
    )
    x_low = 10 ** math.floor(math.log10(min(xs)) - ROOF_MARGIN_DECADES)
    x_high = 10 ** math.ceil(math.log10(max(xs)) + ROOF_MARGIN_DECADES)
    y_low = 10 ** math.floor(math.log10(min(min(ys), x_low * bandwidth)) - ROOF_MARGIN_DECADES)
    y_high = 10 ** math.ceil(math.log10(max(ys)) + ROOF_MARGIN_DECADES)
    inner_w = PLOT_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    inner_h = PLOT_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    px = _log_scale(x_low, x_high, MARGIN_LEFT, inner_w)
    py = _log_scale(y_low, y_high, MARGIN_TOP, inner_h, invert=True)
    # The roof labels sit right of the plot: the canvas widens to the longest ('fp32/fp64_tensor 67 TFLOP/s').
    longest_label = max(
        len("/".join(p for p, v in compute.items() if v == value)) + 12 for value in compute.values()
    )
    width = max(PLOT_WIDTH, MARGIN_LEFT + inner_w + 4 + math.ceil(LABEL_CHAR_PX * longest_label))
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {PLOT_HEIGHT}" '
            f'style="width:100%;max-width:{width * 1.4:.0f}px;height:auto" role="img" aria-label="roofline">'
        ),
        "<title>Roofline: achieved FLOP/s against arithmetic intensity (log-log)</title>",
    ]
    for exponent in range(round(math.log10(x_low)), round(math.log10(x_high)) + 1):
        x = px(10**exponent)
        parts.append(
            f'<line x1="{x:.1f}" y1="{MARGIN_TOP}" x2="{x:.1f}" y2="{MARGIN_TOP + inner_h}" '
            'stroke="#eaeef2"/>'
            f'<text x="{x:.1f}" y="{MARGIN_TOP + inner_h + 14}" text-anchor="middle">1e{exponent}</text>'
        )
    for exponent in range(round(math.log10(y_low)), round(math.log10(y_high)) + 1):
        y = py(10**exponent)
        parts.append(
            f'<line x1="{MARGIN_LEFT}" y1="{y:.1f}" x2="{MARGIN_LEFT + inner_w}" y2="{y:.1f}" '
            'stroke="#eaeef2"/>'
            f'<text x="{MARGIN_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">1e{exponent}</text>'
        )
    parts.append(
        f'<text x="{MARGIN_LEFT + inner_w / 2}" y="{PLOT_HEIGHT - 12}" text-anchor="middle">'
        f"arithmetic intensity (FLOP/byte of DRAM traffic)</text>"
        f'<text transform="translate(16 {MARGIN_TOP + inner_h / 2}) rotate(-90)" text-anchor="middle">'
        f"FLOP/s</text>"
    )
    top_peak = max(compute.values())
    dram_x1, dram_y1 = px(x_low), py(x_low * bandwidth)
    dram_x2, dram_y2 = px(top_peak / bandwidth), py(top_peak)
    # The label runs along the DRAM roof, just above it, so the line never strikes through the text.
    slope_deg = math.degrees(math.atan2(dram_y2 - dram_y1, dram_x2 - dram_x1))
    parts.append(
        f'<line x1="{dram_x1:.1f}" y1="{dram_y1:.1f}" x2="{dram_x2:.1f}" y2="{dram_y2:.1f}" '
        f'stroke="#0550ae" stroke-width="2"><title>DRAM roof: {w.value(bandwidth, "B/s")} '
        f"[{w.text(source_label(str(dram.get('source', ''))))}]</title></line>"
        f'<text transform="translate({dram_x1 + 8:.1f} '
        f"{dram_y1 - 5 + 8 * math.tan(math.radians(slope_deg)):.1f}) "
        f'rotate({slope_deg:.1f})" class="dram">DRAM {w.value(bandwidth, "B/s")}</text>'
    )
    l2 = peak(results, "l2_bytes_per_s")
    if l2 is not None:
        parts.append(
            _l2_roof(
                float(l2["value"]),
                str(l2.get("source") or ""),
                px(x_low),
                px,
                py,
                x_low,
                top_peak,
                slope_deg,
                w,
            )
        )
    # Precisions with the same peak (fp16 and bf16) share one roof and one label. The roofs of the
    # precisions the kernels ran in are drawn solid; the others are dashed, for reference only.
    used = {roof.get("precision")} | {k.get("precision") for k in points}
    roofs: dict[float, list[str]] = {}
    for precision, peak_flops in compute.items():
        roofs.setdefault(peak_flops, []).append(precision)
    label_y = -math.inf
    # Highest roof first (smallest y), each label pushed down clear of the one above it: fp64 and fp32
    # roofs sit a factor of two apart, under one line of text on these axes.
    for peak_flops, precisions in sorted(roofs.items(), reverse=True):
        names = "/".join(precisions)
        ridge_x, roof_y = px(peak_flops / bandwidth), py(peak_flops)
        label_y = max(roof_y + 4, label_y + ROOF_LABEL_GAP)
        style = (
            'stroke="#57606a" stroke-width="1.5"'
            if used & set(precisions)
            else 'stroke="#8c959f" stroke-width="1" stroke-dasharray="4 3"'
        )
        sources = ", ".join(
            sorted({source_label(str(compute_entries[p].get("source", ""))) for p in precisions})
        )
        parts.append(
            f'<line class="roof" x1="{ridge_x:.1f}" y1="{roof_y:.1f}" x2="{MARGIN_LEFT + inner_w}" '
            f'y2="{roof_y:.1f}" {style}/>'
            f'<text x="{MARGIN_LEFT + inner_w + 4}" y="{label_y:.1f}">{w.text(names)} '
            f"{w.value(peak_flops, 'FLOP/s')}</text>"
            f'<circle cx="{ridge_x:.1f}" cy="{roof_y:.1f}" r="3" fill="#57606a"><title>ridge point '
            f"{w.text(names)}: {w.value(peak_flops / bandwidth, 'FLOP/B')} "
            f"[{w.text(sources)}]</title></circle>"
        )
    longest = max((k.get("time_ms") or 0.0 for k in placed), default=0.0) or 1.0
    for kernel in sorted(points, key=lambda k: -(k.get("time_ms") or 0.0)):
        parts.append(
            _kernel_point(
                kernel,
                px(kernel["ai"]),
                py(kernel["flops_per_s"]),
                longest,
                (results.get("timing") or {}).get("step_time_ms"),
                w,
            )
        )
    for layer in sorted(layers, key=lambda k: -(k.get("time_ms") or 0.0)):
        parts.append(_layer_point(layer, px(layer["ai"]), py(layer["flops_per_s"]), longest, w))
    if aggregate:
        x, y = px(aggregate["arithmetic_intensity"]), py(aggregate["flops_per_s"])
        parts.append(
            f'<rect class="aggregate" x="{x - 6:.1f}" y="{y - 6:.1f}" width="12" height="12" fill="#1d232a">'
            f"<title>all placed points together: AI {w.value(aggregate['arithmetic_intensity'], 'FLOP/B')}"
            f", {w.value(aggregate['flops_per_s'], 'FLOP/s')} "
            f"[{w.text(source_label(str(aggregate.get('source') or '')))}]</title></rect>"
        )
    parts.append(
        _legend(MARGIN_LEFT + 10, MARGIN_TOP + 10, points, layers, aggregate is not None, l2 is not None)
    )
    parts.append("</svg>")
    return "".join(parts)


def _l2_roof(
    l2_bandwidth: float,
    source: str,
    x1: float,
    px,
    py,
    x_low: float,
    top_peak: float,
    slope_deg: float,
    w: _Writer,
) -> str:
    """The L2 roof, parallel to the DRAM one: the bound on a point whose data came from L2, read against
    its L2 intensity (FLOPs per L2 byte, in the hover text), not against the DRAM intensity it is
    plotted at."""
    y1, x2, y2 = py(x_low * l2_bandwidth), px(top_peak / l2_bandwidth), py(top_peak)
    return (
        f'<line class="l2-roof" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#1a7f37" '
        f'stroke-width="1.5" stroke-dasharray="6 3"><title>L2 roof: {w.value(l2_bandwidth, "B/s")} '
        f"[{w.text(source_label(source))}]; compare a point's L2 intensity with it</title></line>"
        f'<text transform="translate({x1 + 8:.1f} {y1 - 5 + 8 * math.tan(math.radians(slope_deg)):.1f}) '
        f'rotate({slope_deg:.1f})" class="l2">L2 {w.value(l2_bandwidth, "B/s")}</text>'
    )


def _layer_point(layer: dict, x: float, y: float, longest: float, w: _Writer) -> str:
    share = max(layer.get("time_ms") or 0.0, 0.0) / longest
    size = 1.2 * (POINT_RADIUS_MIN + (POINT_RADIUS_MAX - POINT_RADIUS_MIN) * math.sqrt(share))
    source = str(layer.get("source", ""))
    seconds = (layer.get("time_ms") or 0.0) / 1e3
    # Rates are over ncu's durations of the layer's profiled launches; time_ms is their timeline time
    # per step.
    flops = layer["flops_per_s"] * seconds
    dram_bytes = layer["bytes_per_s"] * seconds if _finite_positive(layer.get("bytes_per_s")) else None
    precision = f" {w.text(layer['precision'])}" if layer.get("precision") else ""
    tooltip = (
        f"<title>{w.text(layer.get('name'))}&#10;AI {w.value(layer.get('ai'), 'FLOP/B')} (L2 "
        f"{w.value(layer.get('l2_ai'), 'FLOP/B')})&#10;"
        f"{w.value(layer.get('flops_per_s'), 'FLOP/s')}{precision}"
        f", {w.value(flops, 'FLOP')}&#10;DRAM {w.value(dram_bytes, 'B')} at "
        f"{w.value(layer.get('bytes_per_s'), 'B/s')}"
        f"&#10;time {w.value(layer.get('time_ms'), 'ms')}, {w.value(layer.get('kernels_per_step'))} kernels, "
        f"{w.value(layer.get('covered_pct'), '%')} of the layer's kernel time profiled"
        f"&#10;{w.text(layer.get('bound'))}-bound, "
        f"{w.value(layer.get('achieved_pct_of_attainable'), '%')} of "
        f"attainable&#10;[{w.text(source_label(source))}]</title>"
    )
    measured = source.startswith("measured:")
    fill = 'fill="#0a7ea4" fill-opacity="0.6"' if measured else 'fill="none"'
    kind = "measured" if measured else "estimated"
    # A triangle (up) for a layer, so it never reads as a kernel's circle or an operator's diamond.
    return (
        f'<polygon class="layer {kind}" points="{x:.1f},{y - size:.1f} {x + size:.1f},{y + size * 0.8:.1f} '
        f'{x - size:.1f},{y + size * 0.8:.1f}" {fill} stroke="#0a7ea4" stroke-width="1.5">{tooltip}</polygon>'
    )


def _kernel_point(kernel: dict, x: float, y: float, longest: float, step_ms: float | None, w: _Writer) -> str:
    relative = max(kernel.get("time_ms") or 0.0, 0.0) / longest
    radius = POINT_RADIUS_MIN + (POINT_RADIUS_MAX - POINT_RADIUS_MIN) * math.sqrt(relative)
    share = (
        100.0 * kernel["time_ms"] / step_ms if step_ms and _finite_positive(kernel.get("time_ms")) else None
    )
    source = str(kernel.get("source", ""))
    precision = f" {w.text(kernel['precision'])}" if kernel.get("precision") else ""
    seconds = (kernel.get("time_ms") or 0.0) / 1e3
    # The point's own totals, rate times its time (for ncu points, the replayed launch; for torch ops,
    # a step).
    flops = kernel["flops_per_s"] * seconds
    dram_bytes = kernel["bytes_per_s"] * seconds if _finite_positive(kernel.get("bytes_per_s")) else None
    tooltip = (
        f"<title>{w.text(kernel.get('name'))}&#10;AI {w.value(kernel.get('ai'), 'FLOP/B')} (L2 "
        f"{w.value(kernel.get('l2_ai'), 'FLOP/B')})&#10;"
        f"{w.value(kernel.get('flops_per_s'), 'FLOP/s')}{precision}"
        f", {w.value(flops, 'FLOP')}&#10;DRAM {w.value(dram_bytes, 'B')} at "
        f"{w.value(kernel.get('bytes_per_s'), 'B/s')}"
        f"&#10;time {w.value(kernel.get('time_ms'), 'ms')} per step, {w.value(share, '%')} of the step"
        f"&#10;{w.text(kernel.get('bound'))}-bound, "
        f"{w.value(kernel.get('achieved_pct_of_attainable'), '%')} of "
        f"attainable&#10;[{w.text(source_label(source))}]</title>"
    )
    if source.startswith("measured:"):  # measured: filled circle
        return (
            f'<circle class="kernel measured" cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="#cf222e" '
            f'fill-opacity="0.7">{tooltip}</circle>'
        )
    # estimated: hollow diamond, so it never reads as a measurement
    d = radius * 1.3
    return (
        f'<polygon class="kernel estimated" points="{x:.1f},{y - d:.1f} {x + d:.1f},{y:.1f} '
        f"{x:.1f},{y + d:.1f} "
        f'{x - d:.1f},{y:.1f}" fill="none" stroke="#8250df" stroke-width="2">{tooltip}</polygon>'
    )


LEGEND_LINE = 18  # SVG units between legend entries


def _legend(x: float, y: float, points: list[dict], layers: list[dict], aggregate: bool, l2: bool) -> str:
    """Only the marks the chart holds: a torch-only run has no measured point, and its estimated
    points are operators (FLOPs from torch, bytes modeled from shapes), not kernels."""
    measured = [str(k.get("source", "")).startswith("measured:") for k in points]
    what = "kernel" if any(measured) else "operator"
    marks = []
    if any(measured):
        marks.append(
            (f'<circle cx="{x}" cy="0" r="5" fill="#cf222e" fill-opacity="0.7"/>', "kernel, measured (ncu)")
        )
    if points and not all(measured):
        diamond = (
            f'<polygon points="{x},-6 {x + 6},0 {x},6 {x - 6},0" fill="none" '
            'stroke="#8250df" stroke-width="2"/>'
        )
        marks.append((diamond, f"{what}, estimated"))
    if layers:
        triangle = (
            f'<polygon points="{x},-6 {x + 6},5 {x - 6},5" fill="#0a7ea4" fill-opacity="0.6" '
            'stroke="#0a7ea4"/>'
        )
        marks.append((triangle, "layer (module range), measured (ncu)"))
    if l2:
        dashed = (
            f'<line x1="{x - 7}" y1="0" x2="{x + 7}" y2="0" stroke="#1a7f37" stroke-width="1.5" '
            'stroke-dasharray="6 3"/>'
        )
        marks.append((dashed, "L2 roof (against L2 intensity)"))
    if aggregate:
        marks.append(
            (f'<rect x="{x - 5}" y="-5" width="10" height="10" fill="#1d232a"/>', f"all {what}s together")
        )
    return "".join(
        f'<g transform="translate(0 {y + index * LEGEND_LINE})">{mark}<text x="{x + 10}" y="4">{label}'
        f"</text></g>"
        for index, (mark, label) in enumerate(marks)
    )


def plotted_layers(results: dict) -> list[dict]:
    """Roofline layer points that can sit on log-log axes (a layer of copies only has no FLOPs)."""
    return [
        k
        for k in (results.get("roofline") or {}).get("layers") or []
        if _finite_positive(k.get("ai")) and _finite_positive(k.get("flops_per_s"))
    ]


def plotted_kernels(results: dict) -> list[dict]:
    """Roofline kernels that can sit on log-log axes: a kernel without FLOPs (a copy, a fill) has no point."""
    return [
        k
        for k in (results.get("roofline") or {}).get("kernels") or []
        if _finite_positive(k.get("ai")) and _finite_positive(k.get("flops_per_s"))
    ]


def _rate_vs_peak(
    rate: object, unit: str, pct: float | None, reference: dict | None, name: str, w: _Writer
) -> str:
    if reference is None:
        return f"{w.value(rate, unit)} (peak unknown)"
    return (
        f"{w.value(rate, unit)} = {w.value(pct, '%')} of {w.text(name)} {w.value(reference['value'], unit)} "
        f"{w.source(reference.get('source'))}"
    )


def _roofline(results: dict, w: _Writer) -> str:
    roof = results.get("roofline") or {}
    if roof.get("bound") is None:
        reason = roof.get("reason") or "not available in this mode"
        return f'<h2>Roofline</h2><p class="muted">Not placed: {w.text(reason)}.</p>'
    position = roofline_vs_peaks(results)
    precision = roof.get("precision")
    unplotted = len(roof.get("kernels") or []) - len(plotted_kernels(results))
    # The point stands for the kernels ncu profiled; the reader must see how much of the step that is.
    basis = f"Over {w.value(roof.get('time_ms'), 'ms')} of profiled kernels"
    coverage = ((results.get("metrics") or {}).get("ncu_coverage_pct") or {}).get("value")
    if coverage is not None:
        basis += f", {w.value(coverage, '%')} of the step's kernel time"
    if unplotted:
        basis += (
            f"; {unplotted} {noun('kernels', unplotted)} without FLOPs "
            f"{'is' if unplotted == 1 else 'are'} not plotted"
        )
    mixed = position["bound_label"] != precision
    compute = _rate_vs_peak(
        roof.get("flops_per_s"),
        "FLOP/s",
        position["compute_pct"],
        position["compute_peak"],
        f"the {position['compute_label']} ceiling" if mixed else f"{precision or 'compute'} peak",
        w,
    )
    dram = _rate_vs_peak(
        roof.get("bytes_per_s"), "B/s", position["dram_pct"], position["dram_peak"], "peak", w
    )
    facts = (
        f"<p><b>{w.text(roof.get('bound'))}-bound</b> "
        f"({w.text(position['bound_label'] or 'precision unknown')}) · "
        f"arithmetic intensity {w.value(roof.get('arithmetic_intensity'), 'FLOP/B')} (L2 "
        f"{w.value(roof.get('l2_arithmetic_intensity'), 'FLOP/B')}) · ridge point "
        f"{w.value(roof.get('ridge_point'), 'FLOP/B')} · "
        f"{w.value(roof.get('achieved_pct_of_attainable'), '%')} "
        f"of attainable {w.source(roof.get('source'))}</p><p>Compute {compute} · DRAM {dram}</p>"
        f'<p class="muted">{basis}.</p>'
    )
    layers_note = ""
    if results.get("layers") and not roof.get("layers"):
        # Results from before layer points, or a run without counters for its layers.
        why = (
            roof.get("layers_reason")
            or "the results give each layer its GPU time (table below) but no FLOPs or DRAM bytes"
        )
        layers_note = f'<p class="muted">Layers are not plotted: {w.text(why)}.</p>'
    elif roof.get("layers"):
        layers_note = (
            f'<p class="muted">Layer points: the {len(roof["layers"])} module ranges with the most '
            "profiled kernel time, each summing the ncu counters of its profiled launches per step "
            "(hover for the share of the layer's kernel time they cover).</p>"
        )
    return f"<h2>Roofline</h2>{facts}{_roofline_svg(results, w)}{layers_note}"


def _lost(finding: dict, timing: dict, w: _Writer) -> str:
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


def _card(index: int, finding: dict, w: _Writer, timing: dict) -> str:
    severity = w.text(finding.get("severity"))
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
        f"{w.text(finding.get('category'))}: {w.text(finding.get('title'))}</h3>"
        + _verified(finding, w)
        + f"<p>time lost: {_lost(finding, timing, w)} · id <code>{w.text(finding.get('id'))}</code>"
        + (
            f'<br><span class="muted">{note[0]}: {w.text(note[1])}</span>'
            if (note := figure_note(finding)) is not None
            else ""
        )
        + "</p>"
        + (f"<table>{evidence}</table>" if evidence else "")
        + _callsites(finding, w)
        + f"<p>{w.text(finding.get('explanation'))}</p>"
        + (f"<ul>{fixes}</ul>" if fixes else "")
        + "</div>"
    )


def _verified(finding: dict, w: _Writer) -> str:
    """What --verify realized, before the predicted figures."""
    line = verify_line(finding)
    return f'<p class="verified"><b>{w.text(line)}</b></p>' if line else ""


def _callsites(finding: dict, w: _Writer) -> str:
    """The finding's top user lines: 'at train.py:42 (63%) total += loss.item()', full paths with
    include_paths."""
    items = "".join(_callsite_item(c, w) for c in finding.get("callsites") or [])
    if items:
        return f'<ul class="callsites">{items}</ul>'
    reason = finding.get("callsite_reason")
    return f'<p class="callsites">{w.text(reason)}</p>' if reason else ""


def _callsite_item(site: dict, w: _Writer) -> str:
    share = f"({w.value(site.get('share_pct'), '%')})"
    if site.get("file") is None:  # only the module range its kernels were launched in
        return f"<li>in module <code>{w.text(site.get('module'))}</code> {share}</li>"
    file = site.get("path") if w.include_paths and site.get("path") else site.get("file")
    module = f" in module <code>{w.text(site['module'])}</code>" if site.get("module") else ""
    return (
        f"<li>at <code>{w.text(file)}:{w.text(site.get('line'))}</code> {share} "
        f"<code>{w.text(site.get('source_line') or site.get('function') or '')}</code>{module}</li>"
    )


def _findings(results: dict, w: _Writer) -> str:
    findings = findings_by_impact(results)
    if not findings:
        return (
            "<h2>Bottlenecks</h2><p>None detected in what this run measured (see the limitations).</p>"
            + _below_floor(results, w)
        )
    timing = results.get("timing") or {}
    return (
        f"<h2>Bottlenecks ({len(findings)})</h2>"
        + "".join(_card(i, f, w, timing) for i, f in enumerate(findings, 1))
        + _below_floor(results, w)
        + "".join(
            f"<p>{w.text(line)}</p>" for line in (replay_error_line(results), skipped_line(results)) if line
        )
    )


def _below_floor(results: dict, w: _Writer) -> str:
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


def _kernels(results: dict, w: _Writer) -> str:
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


def _ranks(results: dict, w: _Writer) -> str:
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


def _roofline_kernels(results: dict, w: _Writer) -> str:
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


def _layers(results: dict, w: _Writer) -> str:
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


def _metrics(results: dict, w: _Writer) -> str:
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


def _pass_step(item: dict, w: _Writer) -> tuple[str, str]:
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


def _first_notes(results: dict, w: _Writer) -> str:
    """The notes that change the reading, above everything else."""
    items = [
        f"<li><b>{w.text(n.kind)}:</b> {w.text(n.text)}</li>"
        for n in reading_notes(results)
        if n.changes_reading
    ]
    return f'<div class="first"><b>Read this first</b><ul>{"".join(items)}</ul></div>' if items else ""


def _notes(results: dict, w: _Writer) -> str:
    items = [
        f"<li><b>{w.text(n.kind)}:</b> {w.text(n.text)}</li>"
        for n in reading_notes(results)
        if not n.changes_reading
    ]
    return f"<h2>Limitations</h2><ul>{''.join(items)}</ul>" if items else ""


def _views(results: dict, w: _Writer) -> str:
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


def _provenance(results: dict, w: _Writer) -> str:
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


def _page(title: str, body: str, w: _Writer) -> str:
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
    w = _Writer(include_paths)
    device = (results.get("device") or {}).get("name") or "no GPU"
    title = f"hybrid report: {device}, {results.get('mode')}"
    body = "".join(
        [
            _first_notes(results, w),
            _summary(results, w),
            _ranks(results, w),
            _roofline(results, w),
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
    w = _Writer(False)
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
    w = _Writer(include_paths)
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
