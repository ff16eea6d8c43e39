"""The replay as a stage of the diagnosis: after the rules ran, every finding whose rule has a fix gets the
replay's saving as its time lost (`time_lost_method: "replay"`); the others keep the rule's closed form
(`"model"`). Severity, order and the primary are the grade's (hybrid.analysis.diagnosis.grade), which runs
next."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import NamedTuple

import numpy as np

from hybrid.analysis.diagnosis import Analyzed, Diagnosis
from hybrid.numbers import NS_PER_MS
from hybrid.provenance import ESTIMATED
from hybrid.replay.choose import calibrated_speedup, calibration_status, pinned_bandwidth
from hybrid.replay.graph import ReplayGraph, ReplayUnavailable, build_graph
from hybrid.replay.simulate import StepReplay, replay_step
from hybrid.replay.transforms import SCOPE_PARAMS, apply, host_scaled
from hybrid.rules.base import SEVERITY_RANK, Evidence, Finding, Fix, FixInputs, NoFix
from hybrid.rules.registry import RULE_BY_ID

# Host-time scales searched when fitting the replay to the step time measured without a collector.
HOST_SCALE_RANGE = (0.05, 2.0)
HOST_SCALE_ITERATIONS = 8
# The analysis replays each finding twice and fits the host scale in about 20 replays: it replays the
# leading steps that hold this many kernels (a quarter second per replay on 2 cores), not a million.
ANALYSIS_MAX_KERNELS = 20_000
# The lightest host a capture has fitted: launch_batch1_deep_mlp ran at 0.41 of its nsys host time plain.
HOST_SCALE_FLOOR = 0.4
# A fit this close to the plain step time is taken; a worse one means the collector slowed the device.
FIT_TOLERANCE = 0.03
FIT_STOP = 0.002  # x5: a replay this close to the plain step fits it
# A fitted range whose upper edge is this far above its lower leaves the host's plain speed open, and each
# plain-step saving is also replayed at both edges (compiled_train_mlp on the H200 fits 0.67-0.84: its
# fusion replays 1.22 ms at 0.75, 0.80-1.44 ms over the range).
WIDE_HOST_RANGE = 1.1


def _edge(graph: ReplayGraph, lo: float, hi: float, inside) -> float:
    """Bisection for the edge of the host scales whose replay satisfies `inside` (monotone in the scale)."""
    for _ in range(HOST_SCALE_ITERATIONS):
        mid = (lo + hi) / 2
        if inside(replay_step(host_scaled(graph, mid)).step_time_ms):
            hi = mid
        else:
            lo = mid
    return hi


class HostFit(NamedTuple):
    """A host scale fitted to a step time: the scale taken, its replay's step time, and the range of
    scales that replay the step as well (lower == upper where the host bounds the step)."""

    scale: float
    step_ms: float
    lower: float
    upper: float


def fit_host_scale(graph: ReplayGraph, target_step_ms: float) -> HostFit:
    """The factor on host time (gaps, call costs) whose replay takes `target_step_ms` per step, and
    that replay's step time. Collectors slow the host far more than the device (nsys ran
    launch_batch1_deep_mlp at 123.7 ms a step, 50.5 ms plain, with the same kernels), so the fit
    moves only host time. Where the device bounds the step, a range of host scales fits the plain
    step equally well (resnet50 b32 fp32: every scale up to about 1.3): the plain step only says the
    host was at most that slow, so the middle of that range is taken, no lower than the lightest
    host any capture has fitted (HOST_SCALE_FLOOR)."""
    lo, hi = HOST_SCALE_RANGE
    tolerance = target_step_ms * FIT_STOP * 5

    def at(scale: float) -> float:
        return replay_step(host_scaled(graph, scale)).step_time_ms

    if at(lo) > target_step_ms + tolerance or at(hi) < target_step_ms - tolerance:
        # No host scale reaches the plain step: return the closest end.
        scale, step_ms = min(
            ((s, at(s)) for s in (lo, 1.0, hi)), key=lambda pair: abs(pair[1] - target_step_ms)
        )
        return HostFit(scale, step_ms, scale, scale)
    upper = _edge(graph, lo, hi, lambda ms: ms > target_step_ms + tolerance)
    lower = min(
        upper, max(HOST_SCALE_FLOOR, _edge(graph, lo, hi, lambda ms: ms >= target_step_ms - tolerance))
    )
    scale = (lower + upper) / 2
    return HostFit(scale, at(scale), lower, upper)


class _Fitted(NamedTuple):
    """The replay graph with its host time scaled, and the step time it replays."""

    graph: ReplayGraph
    scale: float
    step_ms: float
    steady: np.ndarray | None = None  # the steps its mean is over

    def saving_ms(self, fix: Fix, bound_ms: float | None, profiled_step_ms: float) -> float:
        """What `fix` saves on this graph, bounded by the finding's pool (`bound_ms`, on the profiled step
        of `profiled_step_ms`) as the same share of this graph's step."""
        fixed_ms = _mean_on(replay_step(apply(self.graph, _scaled_fix(fix, self.scale))), self.steady)
        bound = float("inf") if bound_ms is None else bound_ms * self.step_ms / profiled_step_ms
        return min(max(0.0, self.step_ms - fixed_ms), bound)


def _mean_on(replay: StepReplay, steady: np.ndarray | None) -> float:
    """The replay's mean step over the base replay's steady steps: a fix must not also change which steps
    count. On dataloader_eval_loop (H100) a 95 ms step turned outlier once the fetch was cut and left the
    mean, and 12.6 ms of host time cut read as 14.7 ms saved."""
    if steady is None or not steady.any() or len(steady) != len(replay.step_ns):
        return replay.step_time_ms
    return float(replay.step_ns[steady].mean() / NS_PER_MS)


def _fitted(graph: ReplayGraph, scale: float, step_ms: float | None = None) -> _Fitted:
    scaled = host_scaled(graph, scale)
    base = replay_step(scaled)
    return _Fitted(scaled, scale, base.step_time_ms if step_ms is None else step_ms, base.steady)


def _scaled_fix(fix: Fix, host_scale: float) -> Fix:
    """The same fix on the host-scaled graph: host work it removes scales with the host."""
    if "saved_ns_per_step" in fix.params and fix.kind == "less_host_work":
        return replace(
            fix, params={**fix.params, "saved_ns_per_step": fix.params["saved_ns_per_step"] * host_scale}
        )
    return fix


def run_fix_inputs(analyzed: Analyzed, graph: ReplayGraph, torch_to_nsys: float = 1.0) -> FixInputs:
    """What every fix of this run reads (its finding's time lost is set per finding, by fix_for)."""
    metrics = {name: metric.value for name, metric in analyzed.metrics.items()}
    pinned_peak = analyzed.peaks.pinned_copy_bytes_per_s
    return FixInputs(
        lost_ms=0.0,
        metrics=metrics,
        gemm_speedup=partial(calibrated_speedup, analyzed.calibration),
        pinned_copy=pinned_bandwidth(graph, analyzed.calibration, {"pinned_copy_bytes_per_s": pinned_peak}),
        torch_to_nsys=torch_to_nsys,
        calibration_status=calibration_status(analyzed.calibration),
    )


def fix_for(finding: Finding, run_inputs: FixInputs) -> Fix | NoFix:
    """The fix the finding's rule proposes, as the replay applies it, or why none is replayed."""
    if finding.not_measured:
        return NoFix("not measured")
    rule = RULE_BY_ID.get(finding.id)
    if rule is None or rule.fix is None:
        return NoFix("the replay has no transformation for this fix: the rule's closed form")
    return rule.fix(replace(run_inputs, lost_ms=float(finding.time_lost_ms or 0.0)))


def _one_saving_per_fix(chosen: list[tuple[Finding, Fix]]) -> list[tuple[Finding, Fix]]:
    """One transformation of the step is one saving: of the findings that replay the same fix, the one it
    saves most for keeps it and the others are shown as its alternatives (across data-dependent syncs the
    launch findings replay the default compile's fused kernels, as the fusion finding does: PyG's GCN read
    0.95 and 1.35 ms from one replay). The fixes that stay, in order."""
    # The fusion with its launches contains the fusion without them: one transformation of the kernels.
    keys = [
        (fix.kind, tuple(sorted((k, v) for k, v in fix.params.items() if k not in SCOPE_PARAMS)))
        for _, fix in chosen
    ]
    kept: dict[tuple, Finding] = {}
    for (finding, _), key in zip(chosen, keys, strict=True):
        if key not in kept or finding.time_lost_ms > kept[key].time_lost_ms:
            kept[key] = finding
    out = []
    for (finding, fix), key in zip(chosen, keys, strict=True):
        owner = kept[key]
        if owner is finding:
            out.append((finding, fix))
        else:
            finding.alternative_to = sorted({*finding.alternative_to, owner.id})
    return out


def replay_findings(diagnosis: Diagnosis, analyzed: Analyzed) -> None:
    """The replay's figures for every finding whose rule has a fix (after weigh_at_plain_step)."""
    timing = diagnosis.timing
    baseline_step_ms = analyzed.baseline_step_ms
    try:
        graph = build_graph(analyzed.profile, max_kernels=ANALYSIS_MAX_KERNELS)
    except ReplayUnavailable as exc:
        timing["replay_step_time_ms"] = None
        for finding in diagnosis.findings:
            finding.time_lost_method = "model"
            finding.replay_reason = f"no replay of the step: {exc}"
        if any(not f.not_measured for f in diagnosis.findings):  # else no time lost to say the method of
            diagnosis.limitations.append(
                f"No replay of the step: {exc}. Time lost is each rule's closed-form estimate."
            )
        return
    base = replay_step(graph)
    timing["replay_step_time_ms"] = base.step_time_ms
    diagnosis.limitations.extend(f"Replay: {note}." for note in graph.notes if "replayed" in note)
    step_ms = timing.get("step_time_ms") or base.step_time_ms
    plain: _Fitted | None = None  # the graph fitted to the plain step
    edges: list[_Fitted] = []  # the graphs at the edges of a wide fitted range
    if baseline_step_ms:
        host_scale, plain_base_ms, lower, upper = fit_host_scale(graph, baseline_step_ms)
        if abs(plain_base_ms / baseline_step_ms - 1) <= FIT_TOLERANCE:
            plain = _fitted(graph, host_scale, plain_base_ms)
            if upper > WIDE_HOST_RANGE * lower:
                edges = [_fitted(graph, edge) for edge in (lower, upper)]
            timing["replay_host_scale"] = host_scale
            timing["replay_host_scale_range"] = [lower, upper]
            timing["replay_baseline_step_time_ms"] = plain_base_ms
            # A collector that barely moves a device-bound step still slows its host (nsys traces every
            # launch), and a fix that shortens the device work meets that host: on resnet50 (H100, the
            # collector +1.7%) the compile replayed 3.31 ms on the profiled step and 11.4 ms on the plain
            # one; --verify realized 12.4 ms. The savings --verify scores are these, so they are weighed.
            timing["weighed_at_plain_step"] = True
        else:
            # The collector slowed the device too (nsys stretched data_pageable_h2d's pageable copies
            # past the whole plain step): no host scale reproduces the plain step, so the saving is
            # carried over as the same share of the step, as for the closed forms.
            timing["replay_host_scale"] = None
            diagnosis.limitations.append(
                f"The replay could not be fitted to the plain step time ({baseline_step_ms:.2f} ms; "
                f"scaling host time reaches {plain_base_ms:.2f} ms): the collector slowed device work "
                "too; replayed savings are carried to the plain step as the same share of the step."
            )
    torch_step = analyzed.metrics.get("torch_pass_step_time_ms")
    torch_step_ms = torch_step.value if torch_step is not None else None
    torch_to_nsys = (
        base.step_time_ms / float(torch_step_ms)
        if isinstance(torch_step_ms, (int, float)) and torch_step_ms
        else 1.0
    )
    run_inputs = run_fix_inputs(analyzed, graph, torch_to_nsys)
    chosen: list[tuple[Finding, Fix]] = []
    # The largest closed forms first: replay_all applies the fixes in this order.
    for finding in sorted(
        diagnosis.findings, key=lambda f: (f.not_measured, -f.time_lost_ms, -SEVERITY_RANK[f.severity], f.id)
    ):
        fix = fix_for(finding, run_inputs)
        if isinstance(fix, NoFix):
            finding.time_lost_method = "model"
            finding.replay_reason = fix.reason
            continue
        fixed_ms = _mean_on(replay_step(apply(graph, fix)), base.steady)
        finding.time_lost_model_ms = finding.time_lost_ms
        # A fix replayed on the whole step can also remove time the ledger gives other causes (CUDA graphs
        # drop the launch gaps inside compiled regions too): the finding's pool bounds what it saves.
        bound = finding.pool_ms
        finding.time_lost_ms = min(
            max(0.0, base.step_time_ms - fixed_ms), bound if bound is not None else float("inf")
        )
        finding.time_lost_pct = 100.0 * finding.time_lost_ms / step_ms if step_ms else 0.0
        if plain is not None:
            finding.time_lost_baseline_ms = plain.saving_ms(fix, bound, base.step_time_ms)
            if edges:
                savings = [finding.time_lost_baseline_ms] + [
                    edge.saving_ms(fix, bound, base.step_time_ms) for edge in edges
                ]
                finding.time_lost_baseline_range_ms = [min(savings), max(savings)]
        elif baseline_step_ms:
            finding.time_lost_baseline_ms = finding.time_lost_ms * baseline_step_ms / base.step_time_ms
        finding.time_lost_method = "replay"
        finding.replay = {
            "fix": fix.kind,
            "description": fix.description,
            "basis": fix.basis,
            "step_time_ms": fixed_ms,
        }
        finding.evidence.append(Evidence("replayed fix", f"{fix.description} ({fix.basis})", "", ESTIMATED))
        chosen.append((finding, fix))
    chosen = _one_saving_per_fix(chosen)
    if chosen:
        combined = graph
        for _, fix in chosen:
            combined = apply(combined, fix)
        all_ms = replay_step(combined).step_time_ms
        diagnosis.replay_all = {
            "findings": [f.id for f, _ in chosen],
            "step_time_ms": all_ms,
            "saved_ms": max(0.0, base.step_time_ms - all_ms),
        }
