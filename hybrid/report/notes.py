"""What a reader must know before trusting the numbers of one results document, in the order to meet it.

A note *changes the reading* when the numbers above it mean something else because of it: steps not
found or found with low confidence, a collector that slowed the step by more than COLLECTOR_SLOWDOWN_PCT,
ncu counters over less than half the kernel time, an export schema hybrid does not know, a fallback mode
and why, no GPU. The terminal and HTML reports show those notes in their default view; the rest
(what this mode cannot see, findings that are placeholders for data the run lacks) is listed after
them and folded in the terminal's default view."""

from __future__ import annotations

from dataclasses import dataclass

from hybrid.report.common import first_sentence
from hybrid.report.units import format_change_pct, format_pct, format_value, is_number
from hybrid.schema import NCU_PLANNED_WARNING, NCU_SKIPPED_WARNING

COLLECTOR_SLOWDOWN_PCT = 10.0  # a collector that slows the step by more changes what its timings say
NCU_COVERAGE_MIN_PCT = 50.0  # kernel-level conclusions rest on less than half the kernel time below this
STEP_CONFIDENCE_MIN = 0.8  # a numeric step_confidence below this (0..1) is reported
CONFIDENT_STEP_LABELS = ("high",)
NCU_PLAN_WARNINGS = (NCU_SKIPPED_WARNING, NCU_PLANNED_WARNING)
# How hybrid.analysis.analyze's limitation for a GPU run without ncu begins; it names what every counter
# family's "not measured" placeholder (hybrid.rules.engine.not_measured) says again.
NO_COUNTERS = "No hardware counters (ncu)"

# Limitations (written by hybrid.analysis.analyze, and hybrid.replay.corrected's) whose subject makes every
# number above them read differently.
_READING_LIMITATIONS = (
    "No CUDA GPU was used",
    "No measured steps were found",
    "Unknown peaks",
    "Savings corrected by what verified runs realized",
)


@dataclass(frozen=True)
class Note:
    kind: str  # "warning" or "limitation"
    text: str
    changes_reading: bool
    # "steps" for the note on how steps were found (the terminal's header says it too); "passes" for a
    # collector's slowdown against the plain pass and the ncu pass's plan, which the Passes line says too;
    # "counters" for a counter family's "not measured" placeholder, which the NO_COUNTERS limitation says
    topic: str = ""


def _steps(results: dict) -> list[Note]:
    workload = results.get("workload") or {}
    confidence = workload.get("step_confidence")
    source = workload.get("step_source")
    low = (is_number(confidence) and confidence < STEP_CONFIDENCE_MIN) or (
        isinstance(confidence, str) and confidence.lower() not in CONFIDENT_STEP_LABELS
    )
    if not low:
        return []
    shown = format_pct(100 * confidence) + "%" if is_number(confidence) else str(confidence)
    unit = f" (one step = {workload['step_unit']})" if workload.get("step_unit") else ""
    why = f" ({workload['step_reason']})" if workload.get("step_reason") else ""
    return [
        Note(
            "warning",
            f"steps found by {source or 'an unknown method'} with {shown} confidence{unit}{why}: "
            "per-step figures rest on that split",
            True,
            topic="steps",
        )
    ]


def _collectors(results: dict) -> list[Note]:
    """A collector's slowdown against the plain pass (--baseline); without one, the torch pass against
    the nsys pass: torch.profiler's operator timings then carry its own overhead."""
    passes = {p.get("name"): p for p in results.get("passes") or [] if isinstance(p, dict)}
    notes = []
    for name in ("torch", "nsys"):
        overhead = (passes.get(name) or {}).get("overhead_pct")
        if is_number(overhead) and overhead > COLLECTOR_SLOWDOWN_PCT:
            notes.append(
                Note(
                    "warning",
                    f"the {name} pass slowed the step by {format_change_pct(overhead)} against "
                    f"the plain pass: its timings are of a slower program",
                    True,
                    topic="passes",
                )
            )
    if "plain" not in passes:
        torch_ms = (passes.get("torch") or {}).get("step_time_ms")
        nsys_ms = (passes.get("nsys") or {}).get("step_time_ms")
        if is_number(torch_ms) and is_number(nsys_ms) and min(torch_ms, nsys_ms) > 0:
            slower, faster = ("torch", "nsys") if torch_ms > nsys_ms else ("nsys", "torch")
            gap = 100.0 * (max(torch_ms, nsys_ms) / min(torch_ms, nsys_ms) - 1.0)
            if gap > COLLECTOR_SLOWDOWN_PCT:
                notes.append(
                    Note(
                        "warning",
                        f"the {slower} pass's step was {format_change_pct(gap)} slower than the "
                        f"{faster} pass's ({format_value(passes[slower]['step_time_ms'], 'ms')} vs "
                        f"{format_value(passes[faster]['step_time_ms'], 'ms')}): a collector slowed the "
                        "program; --baseline measures each against a plain pass",
                        True,
                    )
                )
    return notes


def _coverage(results: dict, warnings: list[str]) -> list[Note]:
    coverage = ((results.get("metrics") or {}).get("ncu_coverage_pct") or {}).get("value")
    if (
        not is_number(coverage)
        or coverage >= NCU_COVERAGE_MIN_PCT
        or any("ncu counters cover" in w for w in warnings)
    ):
        return []
    return [
        Note(
            "warning",
            f"ncu counters cover only {format_pct(coverage)}% of the step's kernel time: "
            "kernel-level conclusions rest on the profiled kernels",
            True,
        )
    ]


def not_measured(results: dict) -> list[dict]:
    """Findings that stand for the hardware counters this run lacks ("not measured in this run"):
    limitations, not bottlenecks."""
    return [f for f in (results.get("diagnosis") or {}).get("bottlenecks") or [] if f.get("not_measured")]


def reading_notes(results: dict) -> list[Note]:
    """Every note of the document: those that change the reading first, then the other limitations."""
    warnings = [str(w) for w in results.get("warnings") or []]
    limitations = [str(n) for n in results.get("limitations") or []]
    first = [*_steps(results), *_collectors(results), *_coverage(results, warnings)]
    first += [
        Note("warning", w, True, topic="passes" if w.startswith(NCU_PLAN_WARNINGS) else "") for w in warnings
    ]
    first += [Note("limitation", n, True) for n in limitations if n.startswith(_READING_LIMITATIONS)]
    rest = [Note("limitation", n, False) for n in limitations if not n.startswith(_READING_LIMITATIONS)]
    for finding in not_measured(results):
        why = first_sentence(str(finding.get("explanation") or "")).rstrip(".")
        rest.append(
            Note(
                "limitation", f"{finding.get('title')}" + (f": {why}" if why else ""), False, topic="counters"
            )
        )
    return first + rest
