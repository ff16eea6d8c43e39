"""`hybrid run --verify N`: after the passes, the top N findings (by the saving they predict) whose fix hybrid
can switch on itself (their rule's `switches`, hybrid.rules.switches) get that fix applied in a plain run of
the script (no collector; hybrid.inject.apply_fix), and what it saves is measured against the run's own plain
step, or, for a flag, against the step with the flag off in the same run. One process per fix, whatever
number of findings share it; a switch the run already had on is never run. A fix whose run fails is recorded
as failed with its reason; the rest of the run is kept. The records go to run.json `verify`
(hybrid.analysis.verified reads them back), and each realized saving into this GPU's history
(hybrid.replay.realized)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from hybrid import host_cpus
from hybrid.analysis.verified import plain_reference, reach_ms, realized, relative_error, within_reach
from hybrid.errors import HybridError
from hybrid.inject.apply_fix import paired_steps
from hybrid.replay import realized as history
from hybrid.rules.advice import RunConfig, config_of, observed_config
from hybrid.rules.data_pipeline import advised_workers
from hybrid.rules.registry import RULE_BY_ID
from hybrid.rules.switches import LOADER_WORKERS, Switch, switch_for
from hybrid.rundir import RunDir


class Runner(Protocol):
    """What verification needs of the run's orchestrator (hybrid.collect.orchestrate.Orchestrator, which
    calls in here: naming it would close an import circle)."""

    run_dir: RunDir
    target: Any  # its display: the command as the user gave it
    passes: list
    mode_reasons: list[str]

    def results(self) -> dict: ...

    def run_side_pass(
        self, name: str, options: list[str], *, note: str, contributed: str, limit_s: float
    ) -> tuple[Any, str | None]: ...


# A fix's run is stopped after this long, or twice the torch pass's wall time where that is longer (a
# compiled fix compiles again: a compiled training script's torch pass took 92 s of a 27 s plain run on the
# H200, benchmarks/results/cost.md); what it measured by then is kept.
MIN_LIMIT_S = 300.0
PASS_PREFIX = "verify-"


@dataclass
class Planned:
    """One fix to run, and the findings it is verified for with their predicted savings (ms per step)."""

    switch: Switch
    predicted_ms: dict[str, float] = field(default_factory=dict)
    titles: list[str] = field(default_factory=list)
    # The saving predicted before this GPU's history corrected it (hybrid.replay.corrected) and the method
    # that predicted it: the history keeps uncorrected predictions, so that corrections never compound.
    uncorrected_ms: dict[str, float] = field(default_factory=dict)
    methods: dict[str, str] = field(default_factory=dict)


def plan(results: dict, top: int, config: RunConfig) -> tuple[list[Planned], list[dict]]:
    """The fixes for the `top` findings with the largest predicted saving whose rule declares a switch this
    run did not have on, and the findings passed over on the way, with why."""
    findings = [
        f
        for f in (results.get("diagnosis") or {}).get("bottlenecks") or []
        if not f.get("not_measured") and not f.get("alternative_to")
    ]
    findings.sort(key=lambda f: -(f.get("weighed_lost_ms") or 0.0))
    planned: dict[str, Planned] = {}
    skipped: list[dict] = []
    verified = 0
    for finding in findings:
        if verified >= top:
            break
        rule = RULE_BY_ID.get(str(finding.get("id")))
        if rule is None or not rule.switches:
            continue
        switch = switch_for(rule.switches, config)
        if switch is None:
            reasons = [str(s.blocked(config)) for s in rule.switches]
            skipped.append({"finding": finding["id"], "reason": "; ".join(reasons)})
            continue
        entry = planned.setdefault(switch.name, Planned(switch))
        entry.predicted_ms[finding["id"]] = _predicted(finding)
        before = finding.get("correction") or {}
        entry.uncorrected_ms[finding["id"]] = _predicted(before) if before else _predicted(finding)
        entry.methods[finding["id"]] = str(before.get("method") or finding.get("time_lost_method"))
        entry.titles.append(str(finding.get("title")))
        verified += 1
    return list(planned.values()), skipped


def _predicted(finding: dict) -> float:
    """The saving a finding predicts on the plain step (on the profiled step where it has no plain one)."""
    return float(finding.get("time_lost_baseline_ms") or finding.get("time_lost_ms") or 0.0)


def verify_fixes(orchestrator: Runner, top: int) -> None:
    """Run the planned fixes (see the module) and write run.json `verify`."""
    run = orchestrator.run_dir
    reference = plain_reference(run)
    if reference is None:
        orchestrator.mode_reasons.append(
            "--verify: nothing verified, as the run has no plain step to compare a fix with (the torch "
            "pass's plain window did not complete)"
        )
        run.update_run_json(mode_reasons=orchestrator.mode_reasons)
        return
    try:
        results = orchestrator.results()
    except HybridError as error:  # the run's own analysis, next, reports it with its exit code
        orchestrator.mode_reasons.append(f"--verify: nothing verified, the diagnosis failed: {error.cause}")
        return
    torch_inject = run.read_inject("torch") or {}
    config = config_of(torch_inject, observed_config(results.get("metrics") or {}))
    planned, skipped = plan(results, top, config)
    block: dict = {"requested": top, "fixes": [], "skipped": skipped}
    run.update_run_json(verify=block)
    torch_wall = next((p.wall_s for p in orchestrator.passes if p.name == "torch"), 0.0)
    entries = []
    metrics = results.get("metrics") or {}
    for item in planned:
        limit_s = max(MIN_LIMIT_S, 2 * torch_wall)
        record = _run_fix(orchestrator, item, reference, limit_s, _loader_workers(item.switch, metrics))
        block["fixes"].append(record)
        run.update_run_json(verify=block)
        outcome = within_reach(
            realized(run, record, reference),
            reach_ms(item.switch.name, metrics),
        )
        # A switch shared by several findings realizes their savings together: each is credited its share
        # of what was realized, in proportion to the predictions.
        total = sum(p for p in item.uncorrected_ms.values() if p > 0)
        for finding_id, predicted in item.uncorrected_ms.items():
            if outcome.get("status") == "realized" and predicted > 0:
                entries.append(
                    {
                        "fix": item.switch.name,
                        "finding": finding_id,
                        "predicted_ms": predicted,
                        "method": item.methods[finding_id],
                        "shown_ms": item.predicted_ms[finding_id],
                        "realized_ms": outcome["realized_ms"] * predicted / total,
                        "error": relative_error(total, outcome["realized_ms"], reference["step_ms"]),
                        "command": orchestrator.target.display,
                        "run": str(run.path.resolve()),
                    }
                )
    device = history.device_key(torch_inject)
    block["history"] = {"device": device, **history.record(device, entries)}
    run.update_run_json(verify=block)


def _loader_workers(switch: Switch, metrics: dict) -> int | None:
    """The DataLoader workers the fix's run gives each loader built without: the count the finding advised
    (hybrid.rules.data_pipeline.advised_workers), so the run realizes the advice as written, else the fix's
    own default for this machine. None for any other fix."""
    if switch is not LOADER_WORKERS:
        return None
    workers = advised_workers(lambda name: (metrics.get(name) or {}).get("value"))
    return workers.count if workers else host_cpus.loader_worker_count(host_cpus.usable_cpus())


def _window(switch: Switch, reference: dict, workers: int | None) -> tuple[int, int]:
    """The warmup and steps of a fix's run: the plain step's (so its last step is the same step of the
    script), more warmup where the fix needs it to settle (the numerics then read the fix's loss at the plain
    step's last step, inside this run's warmup: hybrid.inject.numerics keeps the first steps' losses).

    With `workers` DataLoader workers, each fetching whole batches in turn, a step bound by the fetch is
    periodic: the steps end in bursts of `workers`, one round apart. The first round (the workers' start) is
    warmup and the window holds whole rounds: on the CPU loop of 16 items of 10 ms a batch with 4 workers,
    steps ended in bursts of 4, 170 ms apart, and 10 steps held two or three of the waits (41 or 58 ms a
    step by phase alone)."""
    warmup = max(reference["warmup"], switch.min_warmup)
    steps = reference["steps"]
    if workers:
        warmup = max(warmup, workers)
        steps = -(-steps // workers) * workers
    return warmup, steps


def _run_fix(
    orchestrator: Runner, item: Planned, reference: dict, limit_s: float, workers: int | None
) -> dict:
    """One plain run of the script with the fix on (`workers` for the DataLoader fix) over its window
    (_window), stopped after `limit_s`."""
    name = PASS_PREFIX + item.switch.name
    warmup, steps = _window(item.switch, reference, workers)
    # A flag is timed off and on in its own process, windows as long as the plain one (hybrid.inject.apply_fix
    # PAIRED_ORDER: on, off, on, and a step to settle after each switch).
    paired = ["--paired", str(steps)] if item.switch.paired else []
    if paired:
        steps = paired_steps(steps)
    options = [
        "--warmup",
        str(warmup),
        # A compiled fix's warmup lasts until its step times settle (hybrid.load.settle), not a count: on the
        # H200, launch_batch1_deep_mlp's reduce-overhead run measured compilation and CUDA-graph recording
        # inside its window after 4 warmup steps of a 0.9 ms forward, 77.8 ms a step.
        *([] if item.switch.min_warmup else ["--fixed-warmup"]),
        "--steps",
        str(steps),
        "--apply-fix",
        item.switch.name,
        *(["--loader-workers", str(workers)] if workers else []),
        *paired,
        "--capture-loss",
    ]
    record = {
        "fix": item.switch.name,
        "description": item.switch.description,
        "findings": list(item.predicted_ms),
        "predicted_ms": item.predicted_ms,
        "pass": name,
        "warmup": warmup,
    }
    _result, reason = orchestrator.run_side_pass(
        name,
        options,
        note=f"verifying {item.switch.description} for: {'; '.join(item.titles)}",
        contributed=f"the step with {item.switch.description} on, without a collector",
        limit_s=limit_s,
    )
    return {**record, "status": "ok" if reason is None else "failed", "reason": reason}
