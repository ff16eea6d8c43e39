"""What a rule is and what it returns. Modeled on Nsight Compute's section rules: a rule declares the
metrics its model reads (required, or optional: an absent optional input reaches the model as None and
is listed in the finding, never read as 0), the ledger pool whose time bounds its saving, its floor,
a pure time-lost model, the report that proves it and the fix the replay applies to measure its saving.
hybrid.rules.engine applies them; no rule reads another rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from hybrid.provenance import Metric
from hybrid.rules.advice import RunConfig, Suggestion
from hybrid.rules.switches import Switch

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

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
    id: str  # the stable id of the rule that made it (Rule.id), e.g. sync.per_step
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
    # The ledger causes whose time this finding claims (hybrid.ledger.causes), in the order it drew on them,
    # and the time per step they still held when it did: what fixing this cause can give back at most.
    pool: list[str] = field(default_factory=list)
    pool_ms: float | None = None
    # Optional inputs of the rule's model that this run did not measure.
    missing_inputs: list[str] = field(default_factory=list)
    # Another remedy for time the listed findings own: shown beside them, never added to them.
    alternative_to: list[str] = field(default_factory=list)
    # The suggestions as {text, condition, applies_to} (hybrid.rules.advice.Suggestion).
    advice: list[dict] = field(default_factory=list)
    # The rule's floor: below this share of the step the problem is no finding (checked again once
    # the replay has its figure, hybrid.analysis.diagnosis.grade).
    floor_pct: float = 0.0
    # The time per step it drew from each cause of its pool (hybrid.rules.engine): the ledger segments of
    # those causes are what the finding is made of (an alternative draws none).
    claimed: dict[str, float] = field(default_factory=dict)
    # Set by the stages after the rules (hybrid.analysis.diagnosis); a figure a stage did not set stays out of
    # results.json. The user's lines that spent the time (hybrid.analysis.callsites):
    callsites: list[dict] | None = None
    callsite_reason: str | None = None  # why `callsites` is empty: what the run lacked, or why none applies
    # The time lost as a share of the step without a collector, and its share of that step:
    time_lost_baseline_ms: float | None = None
    time_lost_baseline_pct: float | None = None
    # [low, high] of that saving over the host speeds that replay the plain step, where those span over
    # 10% (hybrid.replay.predict.WIDE_HOST_RANGE): the device bounds the plain step, which leaves the
    # host's speed open.
    time_lost_baseline_range_ms: list[float] | None = None
    # "replay" where the replay measured the fix (then the model's figure is kept), else "model" and why:
    time_lost_method: str | None = None
    time_lost_model_ms: float | None = None
    replay_reason: str | None = None
    replay: dict | None = None  # fix, description, basis, step_time_ms
    # The figures before the fix's realized/predicted ratio on this GPU corrected them
    # (hybrid.replay.corrected).
    correction: dict | None = None
    # The fix switched on and the plain window re-run (hybrid run --verify): the saving it realized beside
    # the predicted one, and whether the loss changed (hybrid.analysis.verified).
    verify: dict | None = None
    # In a torchrun job: the rank it costs most on (None for the job's own findings), every rank it holds on.
    rank: int | None = None
    ranks: list[int] | None = None

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def to_dict(self) -> dict:
        out = asdict(self)
        for name in STAGE_FIELDS:
            if out[name] is None and not (name == "rank" and self.ranks is not None):
                del out[name]
        return out

    def at_rank(self, rank: int) -> Finding:
        return replace(self, rank=rank)

    @property
    def alternative(self) -> bool:
        return bool(self.alternative_to)


# Finding fields the stages after the rules set.
STAGE_FIELDS = (
    "callsites",
    "callsite_reason",
    "time_lost_baseline_ms",
    "time_lost_baseline_pct",
    "time_lost_baseline_range_ms",
    "time_lost_method",
    "time_lost_model_ms",
    "replay_reason",
    "replay",
    "correction",
    "verify",
    "rank",
    "ranks",
)


@dataclass(frozen=True)
class JobFacts:
    """What the multi-GPU rules know of a job beyond its metrics: the straggler rank's own top finding."""

    straggler_primary_title: str | None = None
    straggler_primary_source: str = "estimated"


@dataclass
class Context:
    """Everything the rules of one analysis may read: metric name -> Metric (hybrid/analysis/metrics.py, or
    the job's metrics), the ledger's time per cause per step, the roofline block and plain peaks."""

    metrics: dict[str, Metric]
    pools: Mapping[str, float] = field(default_factory=dict)
    roofline: dict = field(default_factory=dict)
    peaks: dict = field(default_factory=dict)
    has_counters: bool = False
    job: JobFacts | None = None
    # What the run had switched on (inject.json `config`), how each pass of the run ended, and the names of
    # the operators the torch pass saw (advice names the ones that caused a finding).
    config: RunConfig = field(default_factory=RunConfig)
    pass_status: dict[str, str] = field(default_factory=dict)
    op_names: frozenset[str] = frozenset()

    def value(self, name: str, default: float | None = None):
        metric = self.metrics.get(name)
        return default if metric is None or metric.value is None else metric.value

    def evidence(self, label: str, name: str) -> Evidence:
        metric = self.metrics[name]
        return Evidence(label, metric.value, metric.unit, metric.source)


@dataclass(frozen=True)
class Inputs:
    """A rule model's view of the context: the metrics it declared and nothing else (an absent optional
    one is None; an undeclared name is a KeyError), the time left in its pool, and the step."""

    values: Mapping[str, float | int | str | None]
    pool_ms: float | None  # ms per step its pool still holds; None when the rule reads no pool
    step_ms: float
    peaks: Mapping
    roofline: Mapping
    pools: Mapping[str, float]  # every ledger cause's ms per step, as measured (for models that split a pool)

    def __getitem__(self, name: str):
        return self.values[name]


@dataclass(frozen=True)
class Report:
    """What a finding shows: its title, evidence (label, metric name) pairs plus extra evidence, why, and
    what to do; `assumes` names an unmeasured premise of the estimate (shown, and capping the severity)."""

    title: str
    pairs: list[tuple[str, str]]
    explanation: str
    suggestions: list[Suggestion]
    extra: list[Evidence] = field(default_factory=list)
    assumes: str | None = None


@dataclass(frozen=True)
class NotMeasured:
    """The note a rule leaves when the run has no hardware counters for it."""

    id: str
    title: str
    explanation: str


@dataclass(frozen=True)
class Fix:
    """One fix to replay (hybrid.replay.transforms): `kind` picks the transformation, `params` its figures,
    `basis` says where those figures came from, for the evidence ("measured on this GPU: 53.8 -> 17.1 us")."""

    kind: str
    description: str
    params: dict = field(default_factory=dict)
    basis: str = ""


@dataclass(frozen=True)
class NoFix:
    """Why a finding's fix cannot be replayed on this run: its closed-form figure stands."""

    reason: str


@dataclass(frozen=True)
class FixInputs:
    """What a rule's fix reads: its finding's closed-form time lost, the run's metrics, the GEMM speedups
    calibrated on this GPU and the pinned copy rate the replay found, and the torch pass's clock."""

    lost_ms: float  # the finding's time lost per step, as the rule's model estimated it
    metrics: Mapping[str, float | int | str | None]
    # (dtype, variant) -> (share-weighted speedup, its basis) measured on this GPU, or None
    gemm_speedup: Callable[[str, str], tuple[float, str] | None]
    pinned_copy: tuple[float, str] | None  # pinned host->device bytes/s, and where that rate came from
    torch_to_nsys: float = 1.0  # converts a duration the torch pass measured to the analyzed timeline
    # Why gemm_speedup finds no speedup where it finds none: the calibration pass's outcome on this run.
    calibration_status: str = ""

    def number(self, name: str) -> float | None:
        value = self.metrics.get(name)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class CopyFilter:
    """The copies of the shared `copy` pool a finding is about: their directions, and pinned or pageable
    host memory (None: either)."""

    kinds: tuple[str, ...] = ("HtoD", "DtoH")
    pinned: bool | None = None


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    requires: tuple[str, ...]  # metrics the model needs; without one the rule does not apply
    model: Callable[[Inputs], float | None]  # time lost per step (ms), None when the rule does not apply
    report: Callable[[Context, float], Report]  # the finding's text for a time lost
    optional: tuple[str, ...] = ()  # metrics the model reads when measured (None when not)
    pool: tuple[str, ...] = ()  # ledger causes whose unclaimed time bounds the saving, drawn in this order
    floor_pct: float = 0.0  # below this share of the step, no finding
    counters: NotMeasured | None = None  # needs ncu counters; the note to leave without them
    # Another remedy for the pool's time (a larger batch amortizes the host gaps other findings fix): it
    # reads the pool as measured, draws nothing, and is shown as an alternative to those findings.
    alternative: bool = False
    # The change the finding proposes, as the replay applies it (hybrid.replay.predict), or why it cannot be
    # replayed on this run; None when no transformation models it (the closed form stands).
    fix: Callable[[FixInputs], Fix | NoFix] | None = None
    # A metric holding the time of what the finding is about (its own kernels' time): its saving, closed
    # form or replayed, is never larger (a fusion of 112 µs of kernels cannot save 1.37 ms).
    bound: str | None = None
    # Where the user's code behind a finding is found (hybrid.analysis.callsites): the copies of the shared
    # copy pool
    # it is about, and the operators whose recorded stacks place it before its ledger segments do (empty:
    # the operators its evidence names).
    copies: CopyFilter | None = None
    callsite_ops: frozenset[str] | None = None
    # Of the kernels in its pool's causes, those the finding is about (kernel names -> mask; None: all): the
    # fusion finding draws on shared kernel causes for its elementwise chains.
    callsite_kernels: Callable[[pd.Series], np.ndarray] | None = None
    # Holds without a GPU: it reads only the torch pass's host timeline, so it runs on CPU-only runs too.
    host_side: bool = False
    # Its fix replays the speedups the calibration pass times on the run's GPU (FixInputs.gemm_speedup):
    # a run without such a finding skips that pass (hybrid.collect.calibration_pass).
    calibrated: bool = False
    # The fix as settings hybrid can switch on itself, in order of preference: `hybrid run --verify` re-runs
    # the plain window with the first one the run did not already have (hybrid.collect.verify).
    switches: tuple[Switch, ...] = ()
    # For a finding that draws on no pool: the findings it is, on this run, another view of (its time lies in
    # what they claimed and its changes are theirs), given its context, itself and every other finding; it
    # is then shown as their alternative (hybrid.rules.engine.run).
    alternative_when: Callable[[Context, Finding, list[Finding]], list[str]] | None = None
