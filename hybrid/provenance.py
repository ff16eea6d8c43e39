"""Where a number came from. Every metric, evidence item and roofline point carries one of these,
so a report never passes an estimate off as a measurement."""

from __future__ import annotations

from dataclasses import asdict, dataclass

MEASURED_NCU = "measured:ncu"
MEASURED_NSYS = "measured:nsys"
MEASURED_TORCH = "measured:torch"
ESTIMATED = "estimated"
SPEC = "spec"  # a datasheet figure (hardware peaks), neither measured nor estimated from the run

SOURCES = (MEASURED_NCU, MEASURED_NSYS, MEASURED_TORCH, ESTIMATED, SPEC)

# Stronger sources win when two passes measured the same thing.
SOURCE_RANK = {MEASURED_NCU: 4, MEASURED_NSYS: 3, MEASURED_TORCH: 2, SPEC: 1, ESTIMATED: 0}


def source_label(source: str) -> str:
    """Human wording used by renderers: 'measured (nsys)', 'estimated'."""
    if source.startswith("measured:"):
        return f"measured ({source.split(':', 1)[1]})"
    return source


@dataclass(frozen=True)
class Metric:
    value: float | int | str | None
    unit: str
    source: str

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown source {self.source!r}")

    def to_dict(self) -> dict:
        return asdict(self)
