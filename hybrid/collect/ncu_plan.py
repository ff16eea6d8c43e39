"""Whether the ncu pass can change the diagnosis (`--mode auto`), and on which kernels: decided on the
analysis of what the torch and nsys passes measured, before ncu runs. Counters can only change findings
about kernel time (hybrid.ledger's counter causes), and a fix such a finding names only shortens kernels,
so the step replayed with those kernels at zero time bounds what any of them can save."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd

from hybrid.profile import Profile, is_communication

# Ledger pools only hardware counters give a cause (hybrid.ledger.causes): uncoalesced loads, occupancy, an
# idle tensor pipe and the distance to the roofline are ncu's figures; without them that kernel time is
# `kernel_unprofiled`. FP32 GEMMs, narrow alignment and small grids come from names and launch configurations.
COUNTER_POOLS = frozenset(
    {"uncoalesced", "low_occupancy", "tensor_pipe_idle", "below_roofline", "kernel_unprofiled"}
)


@dataclasses.dataclass(frozen=True)
class NcuPlan:
    """Whether the ncu pass runs (`--mode auto`), on which kernels, and why (run.json, the report)."""

    run: bool
    reason: str
    headroom_ms: float | None = None  # the most faster kernels could save a step (KernelHeadroom)
    kernel_names: list[str] | None = None  # the kernels worth counters, where fewer than the selection


class KernelHeadroom:
    """How much shorter the replayed step gets with compute kernels of the measured steps at zero time:
    what no counter-based finding on those kernels can exceed, as each fix such a finding names only
    shortens kernels. With `host_scale` (the analysis' fit to the plain step), on the plain step."""

    def __init__(self, profile: Profile, host_scale: float | None = None) -> None:
        from hybrid.replay.graph import KERNEL, build_graph
        from hybrid.replay.predict import ANALYSIS_MAX_KERNELS
        from hybrid.replay.simulate import replay_step
        from hybrid.replay.transforms import host_scaled

        graph = build_graph(profile, max_kernels=ANALYSIS_MAX_KERNELS)  # ReplayUnavailable where it cannot
        self.graph = host_scaled(graph, host_scale) if host_scale else graph
        names = pd.Series(self.graph.d_name)
        self.names = names.astype(str).to_numpy()
        self.kernels = (
            (self.graph.d_kind == KERNEL)
            & np.isin(self.graph.d_step, self.graph.step_ids)
            & ~is_communication(names)
        )
        self._replay = replay_step
        self.base_ms = replay_step(self.graph).step_time_ms

    def saved_ms(self, keep: Sequence[str] = ()) -> float:
        """The step time saved with every compute kernel but those named in `keep` at zero time."""
        instant = self.graph.copy(copy_arrays=("d_dur",))
        instant.d_dur[self.kernels & ~np.isin(self.names, list(keep))] = 0.0
        return max(0.0, self.base_ms - self._replay(instant).step_time_ms)


def plan_ncu(analysis: dict, profile: Profile, candidates: list[str], *, forced: bool) -> NcuPlan:
    """Run ncu only where its counters can change the diagnosis of `analysis` (the results of the torch and
    nsys passes, without counters), on the `candidates` (select_kernels) whose counters can: all of them
    where a finding rests on kernel time only counters explain (they would measure what it estimates) or
    the timeline found no bottleneck; where faster kernels could save as much as the primary finding (on
    the step the findings are weighed at: the plain step where a collector slowed the measured one,
    hybrid.analysis.diagnosis), the fewest largest candidates that leave the other kernels unable to, even at
    zero
    time; none otherwise. `forced` (--mode hybrid) runs it on every candidate.

    On the committed H200 captures without their counters, this skips 17 of 25 runs, whose primary,
    severities and savings were the same with counters (two gain a LOW memory.uncoalesced finding)."""
    from hybrid.replay.graph import ReplayUnavailable

    if forced:
        return NcuPlan(True, "--mode hybrid runs every pass")
    diagnosis = analysis.get("diagnosis") or {}
    findings = [f for f in diagnosis.get("bottlenecks") or [] if not f.get("not_measured")]
    # A finding rests on counters when its pool starts with a cause only counters can tell (the roofline's
    # below_roofline, uncoalesced loads); the fusion finding draws on those causes only after its own
    # measured chains (kernel_no_shortfall first), and counters would not change what nsys measured of them.
    estimated = [f["id"] for f in findings if (f.get("pool") or [None])[0] in COUNTER_POOLS]
    if estimated:
        return NcuPlan(True, f"counters measure what {', '.join(estimated)} estimates")
    primary = diagnosis.get("primary_bottleneck")
    if not isinstance(primary, dict):
        return NcuPlan(True, "the timeline shows no bottleneck: counters may find one in the kernels")
    timing = analysis.get("timing") or {}
    plain = bool(timing.get("weighed_at_plain_step") and primary.get("time_lost_baseline_ms") is not None)
    host_scale = timing.get("replay_host_scale") if plain else None
    if plain and not host_scale:
        return NcuPlan(True, "the replay was not fitted to the plain step the findings are weighed at")
    try:
        headroom = KernelHeadroom(profile, host_scale)
    except ReplayUnavailable:
        return NcuPlan(True, "the step could not be replayed to bound what faster kernels save")
    primary_ms = _weighed_lost_ms(primary, timing)
    step = "plain step" if plain else "step"
    saved = headroom.saved_ms()

    def bound(compared: str) -> str:
        return (
            f"faster kernels could save at most {saved:.2f} ms a {step} (the step replayed with every "
            f"kernel at zero time), {compared} the primary finding {primary.get('id')} "
            f"({primary_ms:.2f} ms)"
        )

    if saved < primary_ms:
        return NcuPlan(False, bound("less than") + ": counters cannot change the primary", saved)
    for count in range(1, len(candidates)):
        rest_ms = headroom.saved_ms(keep=candidates[:count])
        if rest_ms < primary_ms:
            return NcuPlan(
                True,
                bound("at least") + ": counters can change the primary; ncu profiles the "
                f"{count} largest kernels, as the others at zero time would save "
                f"{rest_ms:.2f} ms, less than the primary",
                saved,
                candidates[:count],
            )
    return NcuPlan(True, bound("at least") + ": counters can change the primary", saved)


def _weighed_lost_ms(finding: dict, timing: dict) -> float:
    """What the finding's fix saves a step on the step the diagnosis weighed it at
    (hybrid.analysis.diagnosis)."""
    value = finding.get("weighed_lost_ms")
    if isinstance(value, (int, float)):
        return float(value)
    if timing.get("weighed_at_plain_step") and finding.get("time_lost_baseline_ms") is not None:
        return float(finding["time_lost_baseline_ms"])
    return float(finding.get("time_lost_ms") or 0.0)
