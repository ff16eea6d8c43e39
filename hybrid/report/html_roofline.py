"""The roofline section of report.html: the measured point or points on the DRAM and L2 roofs of the run's
GPU, as inline SVG with hover text, and the figures that place them."""

from __future__ import annotations

import math

from hybrid.report.common import compute_peaks, peak, roofline_vs_peaks, source_label
from hybrid.report.html_writer import HtmlWriter
from hybrid.report.units import noun

# Roofline plot geometry (SVG user units).
PLOT_WIDTH, PLOT_HEIGHT = 720, 420
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 70, 150, 20, 50
POINT_RADIUS_MIN, POINT_RADIUS_MAX = 3.0, 12.0  # radius grows with sqrt of the kernel's time share
LABEL_CHAR_PX = 6.5  # mean advance of an 11px system-ui character
ROOF_LABEL_GAP = 13  # least vertical distance between roof labels: one line of the 11px SVG font
ROOF_MARGIN_DECADES = 0.3  # space around the data on the log axes, in decades


def _log_scale(low: float, high: float, start: float, length: float, invert: bool = False):
    span = math.log10(high) - math.log10(low)

    def place(value: float) -> float:
        offset = (math.log10(value) - math.log10(low)) / span * length
        return start + (length - offset if invert else offset)

    return place


def _finite_positive(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _roofline_svg(results: dict, w: HtmlWriter) -> str:
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
    w: HtmlWriter,
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


def _layer_point(layer: dict, x: float, y: float, longest: float, w: HtmlWriter) -> str:
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


def _kernel_point(
    kernel: dict, x: float, y: float, longest: float, step_ms: float | None, w: HtmlWriter
) -> str:
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
    rate: object, unit: str, pct: float | None, reference: dict | None, name: str, w: HtmlWriter
) -> str:
    if reference is None:
        return f"{w.value(rate, unit)} (peak unknown)"
    return (
        f"{w.value(rate, unit)} = {w.value(pct, '%')} of {w.text(name)} {w.value(reference['value'], unit)} "
        f"{w.source(reference.get('source'))}"
    )


def roofline_section(results: dict, w: HtmlWriter) -> str:
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
