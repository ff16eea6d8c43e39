"""Renderers of one results dict (the results.json contract, hybrid/schema.py): terminal, JSON, HTML,
and a comparison of two runs. They read only that dict, so a run re-analyzed from disk renders the
same as a fresh one. The helpers below are the formatting every renderer shares, so a value reads
the same (and carries the same provenance wording) in each of them; numbers are written by
hybrid.report.units, text from the profiled program is escaped by hybrid.report.safe_text."""

from __future__ import annotations

import math
import re

from hybrid.provenance import SOURCE_RANK, source_label
from hybrid.report.units import format_value, is_number

__all__ = [
    "compute_peaks",
    "findings_by_impact",
    "first_sentence",
    "format_value",
    "metric_source_counts",
    "overhead_noise",
    "pct_of",
    "peak",
    "roofline_vs_peaks",
    "short_name",
    "short_source",
    "source_label",
    "sources_of",
    "weighed_lost_ms",
]


def findings_by_impact(results: dict) -> list[dict]:
    """The findings in the order the diagnosis ranked them (severity, then the time a fix saves; a received
    file keeps its own order). Findings that only stand for data the run lacks (`not_measured`) are no
    bottleneck: hybrid.report.notes lists them among the limitations."""
    return [f for f in (results.get("diagnosis") or {}).get("bottlenecks") or [] if not f.get("not_measured")]


def instead_of(finding: dict, numbers: dict[str, int]) -> str | None:
    """'instead of #1, #3: the same time, not added to it' for a finding shown as the alternative of the
    numbered findings (`numbers`: id -> its number in the list), else None."""
    shown = sorted(numbers[i] for i in finding.get("alternative_to") or [] if i in numbers)
    if not shown:
        return None
    return f"instead of {', '.join(f'#{n}' for n in shown)}: the same time, not added to it"


def weighed_lost_ms(finding: dict, timing: dict) -> float:
    """The time the finding's fix saves per step, on the step the diagnosis weighed it at; in a results.json
    written before findings carried that figure, read as the diagnosis weighed it then."""
    value = finding.get("weighed_lost_ms")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    baseline = finding.get("time_lost_baseline_ms")
    if (
        timing.get("weighed_at_plain_step")
        and isinstance(baseline, (int, float))
        and not isinstance(baseline, bool)
    ):
        return float(baseline)
    return float(finding.get("time_lost_ms") or 0.0)


def sources_of(finding: dict) -> list[str]:
    """Distinct provenance labels of a finding's evidence, in first-seen order."""
    labels: list[str] = []
    for item in finding.get("evidence") or []:
        label = source_label(str(item.get("source", "")))
        if label not in labels:
            labels.append(label)
    return labels


def short_source(source: str) -> str:
    """The collector alone ('nsys', 'ncu', 'torch') for measured values, 'est.' for estimates: the compact
    tag of one-line findings, where the header line has already said what each collector measured."""
    if source.startswith("measured:"):
        return source.split(":", 1)[1]
    return "est." if source == "estimated" else source


def first_sentence(text: str) -> str:
    """Up to the first full stop followed by a space: the claim of an explanation, without its caveats."""
    head, dot, _rest = text.partition(". ")
    return head + "." if dot else text


def metric_source_counts(results: dict) -> dict[str, int]:
    """How many metrics each source gave, strongest first ({'measured:ncu': 18, ..., 'estimated': 5})."""
    counts: dict[str, int] = {}
    for metric in (results.get("metrics") or {}).values():
        source = str((metric or {}).get("source") or "unknown")
        counts[source] = counts.get(source, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-SOURCE_RANK.get(item[0], -1), item[0])))


def peak(results: dict, name: str, precision: str | None = None) -> dict | None:
    """One device peak as {value, unit, source}: `name` is 'dram_bytes_per_s' or 'flops_per_s' (then by
    precision). None when the device or that peak is unknown, so no percentage is made up."""
    peaks = (results.get("device") or {}).get("peaks") or {}
    entry = peaks.get(name)
    if precision is not None:
        entry = (entry or {}).get(precision) if isinstance(entry, dict) else None
    if not isinstance(entry, dict) or not is_number(entry.get("value")) or not entry["value"] > 0:
        return None
    return entry


def compute_peaks(results: dict) -> dict[str, dict]:
    """Every known compute peak by precision, as {value, unit, source}."""
    flops = ((results.get("device") or {}).get("peaks") or {}).get("flops_per_s") or {}
    return {precision: entry for precision in flops if (entry := peak(results, "flops_per_s", precision))}


def pct_of(value: object, reference: dict | None) -> float | None:
    """value as a percentage of a peak entry; None when either is missing."""
    if not is_number(value) or reference is None or not math.isfinite(float(value)):
        return None
    return 100.0 * float(value) / float(reference["value"])


def roofline_vs_peaks(results: dict) -> dict:
    """Where the step's roofline point sits against the roofs: achieved FLOP/s as % of the step's compute
    ceiling (its points' FLOP mix, hybrid.analysis.roofline; the peak of the roofline's precision in documents
    without one) and achieved DRAM B/s as % of the DRAM peak, each with the peak it used. `compute_label`
    names the ceiling: one precision, or the mix by share of FLOPs; `bound_label` the precision the
    bound is of (several: _mix_label)."""
    roof = results.get("roofline") or {}
    precision = roof.get("precision")
    compute = peak(results, "flops_per_s", precision) if precision else None
    mix = roof.get("precision_mix_pct") or {}
    label = precision
    if is_number(roof.get("ceiling_flops_per_s")):
        compute = {
            "value": roof["ceiling_flops_per_s"],
            "unit": "FLOP/s",
            "source": (compute or {}).get("source", "spec"),
        }
        if len(mix) > 1:
            label = "mix " + ", ".join(f"{p} {share:.0f}%" for p, share in mix.items())
    dram = peak(results, "dram_bytes_per_s")
    return {
        "compute_peak": compute,
        "compute_pct": pct_of(roof.get("flops_per_s"), compute),
        "compute_label": label,
        "bound_label": _mix_label(mix) if len(mix) > 1 else precision,
        "dram_peak": dram,
        "dram_pct": pct_of(roof.get("bytes_per_s"), dram),
    }


# Precisions whose data is 16 or 8 bits: what "mixed precision" means to its readers (autocast, fp16/bf16
# training), not 32-bit data on TF32 tensor cores beside FP32 CUDA cores.
NARROW_PRECISIONS = frozenset({"fp16", "bf16", "fp8", "fp16_scalar", "int8"})


def _mix_label(mix: dict) -> str:
    """Several precisions placed: 'mixed precision' where one of them is narrow, else their names by share
    (a TF32 resnet50 read 'mixed precision' for tf32 94%, fp32 6%)."""
    if NARROW_PRECISIONS & set(mix):
        return "mixed precision"
    return " + ".join(mix)


_TEMPLATE_PARAM_LIST = re.compile(r"\((?:[^()]|\([^()]*\))*\)$")  # trailing "(int, T2, T3)"
_NAMESPACE = re.compile(r"(?:\b[A-Za-z_]\w*|<unnamed>|\(anonymous namespace\))::")
_INT_CAST = re.compile(r"\((?:int|unsigned int|long|unsigned long|bool)\)(-?\d+)")


def _collapse_templates(name: str, keep_depth: int) -> str:
    """Replace template arguments nested deeper than keep_depth with '<...>'."""
    out, depth = [], 0
    for char in name:
        if char == "<":
            depth += 1
            if depth == keep_depth + 1:
                out.append("<...")
            if depth > keep_depth:
                continue
        elif char == ">" and depth > 0:
            depth -= 1
            if depth == keep_depth:
                out.append(">")
            if depth >= keep_depth:
                continue
        elif depth > keep_depth:
            continue
        out.append(char)
    return "".join(out)


def short_name(name: str, width: int = 72) -> str:
    """A C++ kernel name cut to what identifies it on one terminal line: no return type, parameter list
    or namespaces, template arguments kept one level deep (the functor names an elementwise kernel),
    then truncated in the middle. JSON and HTML keep the full name."""
    text = name.strip()
    if len(text) <= width:
        return text
    text = text.removeprefix("void ")
    text = _TEMPLATE_PARAM_LIST.sub("", text)
    text = _NAMESPACE.sub("", text)
    text = _INT_CAST.sub(r"\1", text)
    for depth in (2, 1, 0):
        collapsed = _collapse_templates(text, depth)
        if len(collapsed) <= width:
            return collapsed
    keep = (width - 3) // 2
    return f"{collapsed[:keep]}...{collapsed[-(width - 3 - keep) :]}"


def overhead_noise(pass_row: dict) -> str:
    """ " within step noise" where the 95% interval of a pass's overhead holds no change (a CPU resnet50's
    torch pass read -18.8% on 3 steps against 10 plain ones whose spread alone was 21%), else ""."""
    interval = pass_row.get("overhead_ci_pct")
    if not (isinstance(interval, list) and len(interval) == 2 and all(map(is_number, interval))):
        return ""
    return " within step noise" if interval[0] <= 0 <= interval[1] else ""


def through_text(callsite: dict) -> str | None:
    """'through accelerate/accelerator.py:2861 backward (66%), transformers/activations.py:66 forward
    (5.5%)': the library code a callsite's time went to, each with its share of the finding; None where
    the line made its calls itself."""
    inside = callsite.get("inside")
    if not isinstance(inside, list) or not inside:
        return None
    return "through " + ", ".join(
        f"{item.get('site')} ({format_value(item.get('share_pct'), '%')})"
        for item in inside
        if isinstance(item, dict)
    )
