"""The one-step timeline of the HTML report: results["timeline"] (hybrid.analysis.step_timeline) drawn as
lanes, the host
threads on top (runtime calls: launches, synchronizations), then each stream's kernels, copies and
memsets, then the GPU's idle gaps. The segments the primary finding is about are drawn in full colour,
the rest faded, so the reader sees where in the step the time goes. Inline SVG with <title> hover text,
no script (the page's Content-Security-Policy allows none)."""

from __future__ import annotations

import math
from collections.abc import Callable

from hybrid.report.common import short_name, source_label
from hybrid.report.units import format_value, is_number

WIDTH, LANE_HEIGHT, LABEL_WIDTH, AXIS_HEIGHT, RIGHT_MARGIN = 1000, 22, 130, 24, 30
MIN_SEGMENT_WIDTH = 0.6  # SVG units: a 2 µs kernel in a 40 ms step still shows
COLOURS = {
    "kernel": "#0550ae",
    "memcpy": "#1a7f37",
    "memset": "#6e7781",
    "sync": "#cf222e",
    "launch": "#d4a72c",
    "idle": "#8250df",
}
FADED_OPACITY, HIGHLIGHT_OPACITY = 0.25, 0.95
IDLE_LANE = "GPU idle"
HOVER_NAME_WIDTH = 90

# What the primary finding is about: the events of the ledger cause it claimed most time from
# (`claimed`, results.json's ledger causes), else, for a finding that draws on no cause (fusible
# kernels, step jitter) or a file written before findings said, its category: a kind of event, the GEMM
# kernels or those a compile would fuse, the kernels ncu profiled, or the GPU's idle gaps.
SEGMENTS_BY_CAUSE = {
    "sync_wait": "sync",
    "blocking_copy": "sync",
    "launch_gap": "launch",
    "copy": "memcpy",
    "fp32_gemm": "gemm",
    "misaligned_gemm": "gemm",
    "tensor_pipe_idle": "gemm",
    "small_grid": "profiled",
    "uncoalesced": "profiled",
    "low_occupancy": "profiled",
    "below_roofline": "profiled",
    "kernel_no_shortfall": "profiled",
    "kernel_unprofiled": "profiled",
    "memset": "memset",
    "communication": "communication",
}
SEGMENTS_BY_CATEGORY = {
    "SYNCHRONIZATION": "sync",
    "KERNEL_LAUNCH": "launch",
    "TENSOR_CORE": "gemm",
    "CPU_RESIDENCY": "idle",
    "DATA_PIPELINE": "idle",
    "COMPILER_GRAPH": "fusible",
    "ROOFLINE": "profiled",
    "OCCUPANCY": "profiled",
    "MEMORY_HIERARCHY": "profiled",
    "COMMUNICATION": "communication",
}
SEGMENT_WORDS = {
    "memcpy": "the copies",
    "memset": "the memsets",
    "fusible": "the kernels a compile would fuse",
    "launch": "the launch calls",
    "sync": "the synchronizations",
    "gemm": "the GEMM and convolution kernels",
    "idle": "the GPU's idle gaps",
    "profiled": "the kernels ncu profiled",
    "communication": "the NCCL kernels",
}


def ticks(duration_us: float, most: int = 10) -> list[float]:
    """Round tick positions (1, 2 or 5 times a power of ten) from 0 to the step's end, at most `most`+1."""
    step = 10 ** math.floor(math.log10(duration_us / most))
    step = next(m * step for m in (1, 2, 5, 10) if duration_us / (m * step) <= most)
    return [i * step for i in range(int(duration_us // step) + 1)]


def timeline_css() -> str:
    """The segments' colours, faded unless `lit` (the page's <style>)."""
    # "tl-" keeps these classes apart from the roofline's point classes (.kernel, .layer) on the same page.
    rules = "".join(
        f"svg.timeline rect.tl-{kind}{{fill:{colour};fill-opacity:{FADED_OPACITY}}}"
        for kind, colour in COLOURS.items()
    )
    return rules + f"svg.timeline rect.lit{{fill-opacity:{HIGHLIGHT_OPACITY}}}"


def highlighted_segments(primary: dict | None) -> str | None:
    """Which segments the primary finding is about (a key of SEGMENT_WORDS), or None."""
    if not primary:
        return None
    claimed = primary.get("claimed")
    drawn = (
        {str(cause): ms for cause, ms in claimed.items() if is_number(ms) and ms > 0}
        if isinstance(claimed, dict)
        else {}
    )
    if drawn:
        # Idle causes not listed (host work, a DataLoader fetch, compiled regions) are the GPU's idle gaps.
        kind = SEGMENTS_BY_CAUSE.get(max(drawn, key=drawn.__getitem__), "idle")
        # A fusion draws on the generic kernel causes; what it is about is its runs of fusible kernels.
        return "fusible" if kind == "profiled" and primary.get("category") == "COMPILER_GRAPH" else kind
    return SEGMENTS_BY_CATEGORY.get(str(primary.get("category")))


def idle_gaps(timeline: dict) -> list[tuple[float, float]]:
    """(start_us, dur_us) of the step's stretches with no kernel, copy or memset on any stream."""
    device = sorted(
        (e[2], e[2] + e[3]) for e in timeline.get("events") or [] if e[1] in ("kernel", "memcpy", "memset")
    )
    gaps, cursor = [], 0.0
    for start, end in device:
        if start > cursor:
            gaps.append((cursor, start - cursor))
        cursor = max(cursor, end)
    duration = float(timeline.get("duration_us") or 0.0)
    if duration > cursor:
        gaps.append((cursor, duration - cursor))
    return gaps


def _selector(timeline: dict, results: dict, segments: str | None) -> Callable[[list], bool]:
    names = timeline.get("names") or []
    precisions = timeline.get("precisions") or {}
    # "elementwise": the same indices in results written before fusion counted more than elementwise kernels.
    fusible = set(timeline.get("fusible", timeline.get("elementwise")) or [])
    profiled = {str(k.get("name")) for k in (results.get("roofline") or {}).get("kernels") or []}

    def selected(event: list) -> bool:
        kind, name = event[1], event[4]
        if segments in ("memcpy", "memset", "launch", "sync"):
            return kind == segments
        if kind != "kernel":
            return False
        if segments == "gemm":
            return str(name) in precisions
        if segments == "fusible":
            return name in fusible
        if segments == "profiled":
            return names[name] in profiled
        if segments == "communication":
            return str(names[name]).lower().startswith("nccl")
        return False

    return selected


def timeline_svg(results: dict, text: Callable[[object], str]) -> str:
    """The timeline section; `text` escapes a string for HTML (the report's writer)."""
    timeline = results.get("timeline")
    if not isinstance(timeline, dict) or not timeline.get("events") or not timeline.get("duration_us"):
        return ""
    primary = (results.get("diagnosis") or {}).get("primary_bottleneck")
    segments = highlighted_segments(primary)
    selected = _selector(timeline, results, segments)
    lanes = [*(timeline.get("lanes") or []), IDLE_LANE]
    names = timeline.get("names") or []
    duration = float(timeline["duration_us"])
    inner = WIDTH - LABEL_WIDTH - RIGHT_MARGIN
    height = AXIS_HEIGHT + LANE_HEIGHT * len(lanes) + 6

    def x_of(us: float) -> float:
        return LABEL_WIDTH + us / duration * inner

    parts = [
        (
            f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
            f'role="img" aria-label="timeline" style="width:100%;height:auto">'
        )
    ]
    for tick_us in ticks(duration):
        x = x_of(tick_us)
        parts.append(
            f'<line x1="{x:.1f}" y1="{AXIS_HEIGHT - 4}" x2="{x:.1f}" y2="{height}" stroke="#eaeef2"/>'
            f'<text x="{x:.1f}" y="{AXIS_HEIGHT - 8}" text-anchor="middle">'
            f"{text(format_value(tick_us, 'us'))}</text>"
        )
    for index, lane in enumerate(lanes):
        y = AXIS_HEIGHT + index * LANE_HEIGHT
        parts.append(f'<text x="4" y="{y + LANE_HEIGHT / 2 + 4:.1f}">{text(lane)}</text>')
    # Hover names shortened like the terminal's tables: a page of 2,000 full C++ names would weigh megabytes.
    shown = [short_name(str(name), HOVER_NAME_WIDTH) for name in names]
    drawn = [
        (e[0], e[1], float(e[2]), float(e[3]), shown[e[4]] if e[4] < len(shown) else "", selected(e))
        for e in timeline["events"]
    ]
    gaps = idle_gaps(timeline)
    drawn += [(len(lanes) - 1, "idle", start, dur, "GPU idle", segments == "idle") for start, dur in gaps]
    for lane, kind, start, dur, name, lit in drawn:
        y = AXIS_HEIGHT + lane * LANE_HEIGHT + 3
        # Colour and opacity come from the page's CSS classes (timeline_css): a step has up to 2,000 segments.
        parts.append(
            f'<rect class="tl-{kind}{" lit" if lit or segments is None else ""}" '
            f'x="{x_of(start):.1f}" y="{y}" '
            f'width="{max(MIN_SEGMENT_WIDTH, dur / duration * inner):.1f}" height="{LANE_HEIGHT - 6}">'
            f"<title>{text(name)}&#10;{kind}, {text(format_value(dur, 'us'))} at "
            f"{text(format_value(start, 'us'))}</title></rect>"
        )
    parts.append("</svg>")
    step = timeline.get("step")
    caption = (
        f"Step {text(step)} (the steady step of median duration), {text(format_value(duration, 'us'))}, "
        f"{text(lanes[0] if lanes else '')} on top. "
    )
    if segments is not None and primary:
        caption += (
            f"In colour: {text(SEGMENT_WORDS[segments])}, what the primary finding "
            f"({text(primary.get('title'))}) is about; the rest is faded. "
        )
    idle_us = sum(dur for _, dur in gaps)
    caption += (
        f"The GPU is idle {text(format_value(idle_us, 'us'))} of the step, in {len(gaps)} "
        f"{'gap' if len(gaps) == 1 else 'gaps'}. "
    )
    total, kept = timeline.get("events_total"), len(timeline["events"])
    if isinstance(total, int) and total > kept:
        caption += (
            f"{kept} of the step's {total} events are drawn (device work and syncs first, longest first). "
        )
    legend = " ".join(
        f'<span style="color:{colour}">&#9632;</span> {kind}' for kind, colour in COLOURS.items()
    )
    return (
        f'<h2>One step</h2><p class="muted">{caption}Hover a segment for its name and duration '
        f"[{text(source_label(str(timeline.get('source') or '')))}].</p>"
        f'{"".join(parts)}<p class="muted">{legend}</p>'
    )
