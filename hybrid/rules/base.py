"""What a rule is and what it returns. Modeled on Nsight Compute's section rules: a rule declares
the metrics it needs, returns early (None) when it does not apply, and reports its focus metrics as
evidence. The time-lost estimate is a separate pure function per rule so it can be unit-tested."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from hybrid.profile import Profile
from hybrid.provenance import Metric
from hybrid.rules.advice import RunConfig

CATEGORIES = (
    "ROOFLINE",
    "KERNEL_LAUNCH",
    "SYNCHRONIZATION",
    "CPU_RESIDENCY",
    "DATA_PIPELINE",
    "OCCUPANCY",
    "MEMORY_HIERARCHY",
    "TENSOR_CORE",
    "COMPILER_GRAPH",
    "COMMUNICATION",
)
SEVERITIES = ("CRITICAL", "SEVERE", "MODERATE", "LOW")
SEVERITY_RANK = {"CRITICAL": 3, "SEVERE": 2, "MODERATE": 1, "LOW": 0}


@dataclass(frozen=True)
class Evidence:
    label: str
    value: float | int | str | None
    unit: str
    source: str  # a provenance value (hybrid.provenance)


@dataclass
class Finding:
    id: str  # stable rule id, e.g. "sync.per_step"
    title: str
    category: str
    severity: str
    evidence: list[Evidence]
    explanation: str
    suggestions: list[str]  # each says what to change, why it applies to this run and what it is about
    # Estimated step time this problem costs, and what fixing it would save (ms per step); the
    # primary bottleneck is the finding with the largest value, not the first rule that fired.
    time_lost_ms: float = 0.0
    time_lost_pct: float = 0.0
    # A family that needs data we did not collect says so instead of guessing (severity LOW).
    not_measured: bool = False
    # The suggestions as {text, condition, applies_to} (hybrid.rules.advice.Suggestion).
    advice: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Context:
    """Everything a rule may read. `metrics` maps metric name -> Metric (see hybrid/metrics.py)."""

    profile: Profile
    metrics: dict[str, Metric]
    roofline: dict = field(default_factory=dict)
    peaks: dict = field(default_factory=dict)
    # What the run had switched on (inject.json `config`), and how each pass of the run ended.
    config: RunConfig = field(default_factory=RunConfig)
    pass_status: dict[str, str] = field(default_factory=dict)

    def value(self, name: str, default: float | None = None):
        metric = self.metrics.get(name)
        return default if metric is None or metric.value is None else metric.value

    def evidence(self, label: str, name: str) -> Evidence:
        metric = self.metrics[name]
        return Evidence(label, metric.value, metric.unit, metric.source)


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    requires: tuple[str, ...]  # metric names that must be present, else the rule is skipped
    check: Callable[[Context], Finding | None]

    def applies(self, ctx: Context) -> bool:
        return all(ctx.metrics.get(name) is not None and ctx.metrics[name].value is not None
                   for name in self.requires)

    def evaluate(self, ctx: Context) -> Finding | None:
        if not self.applies(ctx):
            return None
        return self.check(ctx)
