"""Whether the ncu pass can change the diagnosis (`--mode auto`), and on which kernels: decided on the
analysis of what the torch and nsys passes measured, before ncu runs.

Counters change one thing: the ledger cause of a compute kernel that no name or launch configuration
already classes (hybrid.ledger.shortfall: an FP32 GEMM, a narrow-alignment GEMM and a grid smaller than
the GPU are told without counters, and take precedence over every counter cause; counters also measure a
GEMM's precision, taken to agree with the one its name states: they do for all 39 such kernels ncu measured
in the 24 committed H200 captures). Without counters that
time is `kernel_unprofiled`; with them it moves to uncoalesced, low_occupancy, tensor_pipe_idle,
below_roofline or kernel_no_shortfall. So a finding resting on counters claims at most that time (its
pool), and the analysis weighs such a claim by replaying the step with the claimed kernel time taken off
the step's kernels (hybrid.replay.transforms.faster_kernels): the replay of the movable time is the most
it can save, and the movable time bounds what moves into or out of another finding's pool."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from hybrid.profile import LAUNCH_CONFIG_COLUMNS, Profile, is_communication
from hybrid.rules.engine import severity_for
from nsight.ncu import SECONDS_PER_LAUNCH, function_base_name

# Ledger pools only hardware counters give a cause (hybrid.ledger.causes): uncoalesced loads, occupancy, an
# idle tensor pipe and the distance to the roofline are ncu's figures; without them that kernel time is
# `kernel_unprofiled`. FP32 GEMMs, narrow alignment and small grids come from names and launch configurations.
COUNTER_POOLS = frozenset(
    {"uncoalesced", "low_occupancy", "tensor_pipe_idle", "below_roofline", "kernel_unprofiled"}
)
# The causes counters move kernel time between: a finding drawing on one of them can gain or lose time.
MOVABLE_CAUSES = COUNTER_POOLS | {"kernel_no_shortfall"}
# The cause of the kernel time whose cause counters could tell (the time they can move).
UNCLASSED = "kernel_unprofiled"


@dataclasses.dataclass(frozen=True)
class NcuPlan:
    """Whether the ncu pass runs (`--mode auto`), on which kernels, and why (run.json, the report)."""

    run: bool
    reason: str
    headroom_ms: float | None = None  # the most a finding resting on counters saves a step (weighed)
    kernel_names: list[str] | None = None  # the kernels worth counters, where fewer than the selection
    movable_ms: float | None = None  # kernel time a step counters could give a cause (kernel_unprofiled)
    # Where the replay budget cut the kernels: budget_s, launches (replayed), launches_wanted,
    # movable_ms_left_out (a step, of the kernels the answer wanted counters on).
    budget: dict | None = None


def launches_by_base(kernels: pd.DataFrame) -> pd.Series:
    """Per function base name, the launch configurations among `kernels` (one step's): what ncu replays
    for a selection holding that base name (one launch per configuration, build_ncu_command)."""
    names = kernels["name"].astype(str)
    bases = names.map({name: function_base_name(name) for name in names.unique()})
    return kernels.assign(base=bases).drop_duplicates(["base", *LAUNCH_CONFIG_COLUMNS]).groupby("base").size()


def replayed_launches(kernels: pd.DataFrame, kernel_names: Sequence[str]) -> int:
    """How many launches ncu replays for `kernel_names` in `kernels` (one step's)."""
    held = launches_by_base(kernels)
    return int(held.reindex(sorted({function_base_name(name) for name in kernel_names})).fillna(0).sum())


class KernelHeadroom:
    """What counters could change on one profile: the kernel time a step that no name or launch
    configuration classes (`movable_ms`, per kernel name), and what a finding claiming some of it saves
    the replayed step (`weighed_ms`). With `host_scale` (the analysis' fit to the plain step), on the
    plain step."""

    def __init__(self, profile: Profile, host_scale: float | None = None) -> None:
        from hybrid.hardware import peaks_for
        from hybrid.ledger.shortfall import kernel_causes
        from hybrid.replay.graph import build_graph
        from hybrid.replay.predict import ANALYSIS_MAX_KERNELS
        from hybrid.replay.simulate import replay_step
        from hybrid.replay.transforms import host_scaled

        graph = build_graph(profile, max_kernels=ANALYSIS_MAX_KERNELS)  # ReplayUnavailable where it cannot
        self.graph = host_scaled(graph, host_scale) if host_scale else graph
        self._replay = replay_step
        self.base_ms = replay_step(self.graph).step_time_ms
        kernels = profile.kernels
        causes = kernel_causes(profile, peaks_for(profile.device))
        steps = np.asarray(self.graph.step_ids)
        movable = (
            (causes == UNCLASSED)
            & kernels["step"].isin(steps).to_numpy(bool)
            & ~is_communication(kernels["name"])
        )
        duration_ms = (kernels["end_ns"] - kernels["start_ns"]).to_numpy(float) / 1e6
        per_step = max(len(steps), 1)
        names = kernels["name"].astype(str).to_numpy()
        self.by_name = (
            pd.Series(duration_ms[movable], dtype=float).groupby(names[movable]).sum().div(per_step)
        )
        # ncu replays one launch per launch configuration in one step, of every kernel whose function base
        # name a selected kernel shares (its filter matches base names, nsight.ncu.kernel_name_filter): on
        # the H100 (resnet50 b64) the 5 s budget planned 10 launches of 3 kernels and ncu replayed 19, the
        # clamps, fills and cutlass tiles sharing their base names among them.
        first = kernels[kernels["step"].to_numpy() == steps.min()] if len(steps) else kernels.iloc[:0]
        self._launches_by_base = launches_by_base(first)
        # Kernel time a step of every kernel name, for the order of kernels holding no movable time.
        in_step = kernels["step"].isin(steps).to_numpy(bool)
        self.step_ms_by_name = (
            pd.Series(duration_ms[in_step], dtype=float).groupby(names[in_step]).sum().div(per_step)
        )

    def launches_of(self, name: str) -> int:
        """Launches ncu replays for a kernel name: the launch configurations in one step of the kernels
        sharing its function base name (at least one)."""
        return self.launches_for([name])

    def launches_for(self, kernel_names: Sequence[str]) -> int:
        """Launches ncu replays for these kernel names together: kernels sharing a base name share them."""
        bases = {function_base_name(name) for name in kernel_names}
        return sum(max(1, int(self._launches_by_base.get(base, 1))) for base in bases)

    def profiling_order(self, candidates: Sequence[str]) -> list[str]:
        """The candidates holding movable time, most of it per launch ncu replays first: the fewest launches
        that take the most movable time out of what the unprofiled rest could move."""
        held = self.by_name[self.by_name.index.isin(list(candidates)) & (self.by_name > 0)]
        per_launch = held / [self.launches_of(name) for name in held.index]
        return list(per_launch.sort_values(ascending=False, kind="stable").index)

    def budget_order(self, kernel_names: Sequence[str]) -> list[str]:
        """`kernel_names` in the order a launch budget takes them: the kernels holding movable time first,
        most of it per launch (profiling_order), then the others by their kernel time per launch (their
        counters measure FLOPs and bytes the roofline uses, but cannot give kernel time another cause)."""
        movable = self.profiling_order(kernel_names)
        rest = [name for name in kernel_names if name not in movable]
        rest.sort(key=lambda name: -float(self.step_ms_by_name.get(name, 0.0)) / self.launches_of(name))
        return movable + rest

    def movable_ms(self, profiled: Sequence[str] = ()) -> float:
        """Kernel time a step whose cause counters could tell, outside the kernels named in `profiled`."""
        return float(self.by_name.drop(list(profiled), errors="ignore").sum())

    def weighed_ms(self, claimed_ms: float) -> float:
        """What a kernel finding claiming `claimed_ms` of kernel time a step saves the replayed step: the
        claim taken off the step's kernels in proportion to their time, as the analysis replays it
        (hybrid.replay.predict, the faster_kernels fix)."""
        from hybrid.replay.transforms import faster_kernels
        from hybrid.rules.base import Fix

        if claimed_ms <= 0:
            return 0.0
        fix = Fix("faster_kernels", "", {"saved_ns_per_step": claimed_ms * 1e6}, "")
        return max(0.0, self.base_ms - self._replay(faster_kernels(self.graph, fix)).step_time_ms)


def plan_ncu(
    analysis: dict,
    profile: Profile,
    candidates: list[str],
    *,
    forced: bool,
    budget_s: float | None = None,
) -> NcuPlan:
    """The ncu pass's plan (_plan_by_answer), its replay held within `budget_s` seconds (None or 0: no
    budget): where the kernels the answer wants counters on would replay more launches than the budget
    holds (SECONDS_PER_LAUNCH each), those holding the most movable time per launch, as many as it holds.
    `forced` (--mode hybrid) runs ncu on every candidate, without a budget."""
    if forced:
        return NcuPlan(True, "--mode hybrid runs every pass")
    plan = _plan_by_answer(analysis, profile, candidates)
    if not plan.run or not budget_s or budget_s <= 0:
        return plan
    return _within_budget(plan, profile, candidates, budget_s)


def _within_budget(plan: NcuPlan, profile: Profile, candidates: list[str], budget_s: float) -> NcuPlan:
    from hybrid.replay.graph import ReplayUnavailable

    try:
        headroom = KernelHeadroom(profile)
    except ReplayUnavailable:
        return plan  # no step to order kernels on: the plan as the answer made it
    wanted = plan.kernel_names or list(candidates)
    launches_wanted = headroom.launches_for(wanted)
    allowed = max(1, int(budget_s / SECONDS_PER_LAUNCH))
    if launches_wanted <= allowed:
        return plan
    chosen: list[str] = []
    chosen_bases: set[str] = set()
    used = 0
    for name in headroom.budget_order(wanted):
        base = function_base_name(name)
        cost = 0 if base in chosen_bases else headroom.launches_of(name)  # a base name's launches count once
        if not chosen or used + cost <= allowed:
            chosen.append(name)
            chosen_bases.add(base)
            used += cost
    movable_wanted = headroom.movable_ms() - headroom.movable_ms(wanted)
    left_out = headroom.movable_ms(chosen) - headroom.movable_ms(wanted)
    every_launch_s = math.ceil(launches_wanted * SECONDS_PER_LAUNCH)
    reason = (
        f"{plan.reason}; ncu's replay budget of {budget_s:g} s (about {SECONDS_PER_LAUNCH} s a launch) "
        f"holds {used} of the {launches_wanted} launches those kernels take: the {len(chosen)} holding the "
        f"most time counters can move per launch, {movable_wanted - left_out:.2f} of "
        f"{movable_wanted:.2f} ms a step; the rest keep no counters "
        f"(--ncu-budget-s {every_launch_s} replays them all)"
    )
    return dataclasses.replace(
        plan,
        reason=reason,
        kernel_names=chosen,
        budget={
            "budget_s": budget_s,
            "launches": used,
            "launches_wanted": launches_wanted,
            "movable_ms_left_out": round(left_out, 3),
        },
    )


def _plan_by_answer(analysis: dict, profile: Profile, candidates: list[str]) -> NcuPlan:
    """Run ncu only where its counters can change the diagnosis of `analysis` (the results of the torch and
    nsys passes, without counters), on the `candidates` (select_kernels) whose counters can: all of them
    where a finding rests on kernel time only counters explain (they would measure what it estimates) or
    the timeline found no bottleneck. Otherwise, on the step the findings are weighed at (the plain step
    where a collector slowed the measured one, hybrid.analysis.diagnosis): where the time counters can move
    could make a finding that overtakes the primary, or take enough from a finding sharing its pool to
    change the primary or a severity, the fewest candidates, most movable time per launch first, that leave
    the rest unable to; none otherwise."""
    from hybrid.replay.graph import ReplayUnavailable

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
        return NcuPlan(True, "the step could not be replayed to bound what counters change")
    movable = headroom.movable_ms()
    gain = headroom.weighed_ms(movable)
    sway = _Sway(findings, (analysis.get("ledger") or {}).get("ms_per_step") or {}, timing, plain)
    bound = (
        f"counters can give a cause to {movable:.2f} ms of kernel time a step (the kernels no name or launch "
        f"configuration classes); a finding claiming all of it would save {gain:.2f} ms a "
        f"{'plain step' if plain else 'step'} (replayed)"
    )
    change = sway.change(primary, movable, gain)
    if change is None:
        added = severity_for(100.0 * gain / sway.step_ms) if sway.step_ms else "LOW"
        return NcuPlan(
            False,
            f"{bound}, less than the primary finding {primary['id']} ({sway.weighed(primary):.2f} ms), and "
            "no finding sharing that time could change severity: counters cannot change the primary or a "
            f"severity (a finding they add would be {added} at most)",
            headroom_ms=gain,
            movable_ms=movable,
        )
    ranked = headroom.profiling_order(candidates)
    for count in range(1, len(ranked)):
        rest = headroom.movable_ms(ranked[:count])
        if sway.change(primary, rest, headroom.weighed_ms(rest)) is None:
            return NcuPlan(
                True,
                f"{bound}: {change}; ncu profiles the {count} kernels holding the most of that time per "
                f"launch it replays, as the others' ({rest:.2f} ms) could change neither",
                kernel_names=ranked[:count],
                headroom_ms=gain,
                movable_ms=movable,
            )
    # No fewer will do: every candidate holding such time, as the others' counters cannot move theirs.
    fewer = ranked if len(ranked) < len(candidates) else None
    return NcuPlan(True, f"{bound}: {change}", headroom_ms=gain, kernel_names=fewer, movable_ms=movable)


class _Sway:
    """How far counters can move each finding's weighed saving when they give a cause to some kernel time:
    a finding drawing on the causes they move time between loses what counter findings drawn before it
    take beyond what its pool holds over its claim (its pool's ledger time, less what other findings
    drew); a finding counters add saves at most what claiming all that time saves."""

    def __init__(self, findings: list[dict], pools: dict, timing: dict, plain: bool) -> None:
        self.findings = findings
        self.pools = pools
        # The step findings are weighed at: the plain step where a collector slowed the measured one.
        self.step_ms = float(
            (timing.get("baseline_step_time_ms") if plain else timing.get("step_time_ms")) or 0
        )
        measured = timing.get("replay_step_time_ms") or timing.get("step_time_ms")
        weighed = timing.get("replay_baseline_step_time_ms") or timing.get("baseline_step_time_ms")
        # A millisecond drawn on the measured step, on the step findings are weighed at.
        self.to_weighed = (weighed / measured) if plain and weighed and measured else 1.0

    def weighed(self, finding: dict) -> float:
        # The analysis ncu is planned on is this run's own: its diagnosis weighed every finding
        # (hybrid.analysis.diagnosis writes weighed_lost_ms).
        return float(finding.get("weighed_lost_ms") or 0.0)

    def spare_ms(self, finding: dict) -> float | None:
        """What the finding's pool holds beyond its claim; None where it draws on no cause counters move."""
        pool = finding.get("pool") or []
        if not set(pool) & MOVABLE_CAUSES:
            return None
        others = [f for f in self.findings if f is not finding]
        left = sum(
            max(
                0.0,
                float(self.pools.get(cause, 0.0))
                - sum((f.get("claimed") or {}).get(cause, 0.0) for f in others),
            )
            for cause in pool
        )
        return left - float(finding.get("time_lost_ms") or 0.0)

    def highest(self, finding: dict, movable_ms: float) -> float:
        """The most the finding's weighed saving can be with counters: time moves into its pool only where it
        draws on a cause counters move time to and not on the one they move it from (no rule does today:
        the fusion finding's pool holds both)."""
        pool = set(finding.get("pool") or [])
        if UNCLASSED in pool or not pool & (MOVABLE_CAUSES - {UNCLASSED}):
            return self.weighed(finding)
        return self.weighed(finding) + movable_ms * self.to_weighed

    def lowest(self, finding: dict, movable_ms: float) -> float:
        """The least the finding's weighed saving can be once counters give a cause to `movable_ms`."""
        spare = self.spare_ms(finding)
        if spare is None or spare >= movable_ms:
            return self.weighed(finding)
        return max(0.0, self.weighed(finding) - (movable_ms - max(spare, 0.0)) * self.to_weighed)

    def _band(self, saved_ms: float, finding: dict) -> str:
        """The severity band of a saving on the weighed step, or "below floor" where the finding would be
        dropped (hybrid.analysis.diagnosis.grade)."""
        share = 100.0 * saved_ms / self.step_ms if self.step_ms else 0.0
        return "below floor" if share < float(finding.get("floor_pct") or 0.0) else severity_for(share)

    def change(self, primary: dict, movable_ms: float, gain_ms: float) -> str | None:
        """What counters giving a cause to `movable_ms` (a finding claiming it all saving `gain_ms`) can
        change: the primary or another finding's severity; None where neither."""
        floor = self.lowest(primary, movable_ms)
        if gain_ms >= floor:
            return (
                f"a finding resting on counters could save as much as the primary finding {primary['id']} "
                f"({floor:.2f} ms)"
            )
        for finding in self.findings:
            if finding.get("id") == primary.get("id"):
                continue
            high = self.highest(finding, movable_ms)
            # An alternative remedy for time other findings own is never the primary.
            if not finding.get("alternative_to") and high >= floor:
                return f"{finding['id']} could overtake the primary finding {primary['id']}"
            now, low = self._band(self.weighed(finding), finding), self.lowest(finding, movable_ms)
            if self._band(low, finding) != now or self._band(high, finding) != now:
                moved = max(self.weighed(finding) - low, high - self.weighed(finding))
                return (
                    f"counters could move up to {moved:.2f} ms of {finding['id']}'s saving "
                    f"({finding.get('severity')}), which draws on that time"
                )
        return None
