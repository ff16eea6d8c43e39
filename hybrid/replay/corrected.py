"""Predictions corrected by what verifying their fixes realized on this GPU (hybrid.replay.realized): a stage
of the diagnosis after the replay and before the grade, so severity, order and the primary follow the
corrected savings. A finding whose fix (its rule's switch this run did not have on, the one `--verify`
would run: hybrid.rules.switches.switch_for) has realized.MIN_RUNS verified runs in the run's history, for
predictions made as this one was (replayed, or a closed form), gets its savings scaled by their median
realized/predicted ratio, `time_lost_method: "corrected"` and the reason; the figures before the correction
stay in its `correction` block. The limitations state the predictions' error on this GPU."""

from __future__ import annotations

from typing import Any

from hybrid.analysis.diagnosis import Analyzed, Diagnosis
from hybrid.numbers import significant as fmt
from hybrid.provenance import ESTIMATED
from hybrid.replay.realized import METHODS, MIN_RUNS, Correction, corrections, median_error_pct
from hybrid.rules.advice import config_of, observed_config
from hybrid.rules.base import Evidence, Finding
from hybrid.rules.registry import RULE_BY_ID
from hybrid.rules.switches import Switch, switch_for

METHOD = "corrected"


def correct_by_verified(diagnosis: Diagnosis, analyzed: Analyzed) -> None:
    """Scale the predicted savings of the fixes this GPU's history can correct (see the module)."""
    history = analyzed.realized_history
    if not history:
        return
    by_fix = history.get("by_fix") or {}
    found = corrections(by_fix)
    config = config_of(analyzed.profile.extras, observed_config(analyzed.metrics))
    corrected: list[str] = []
    for finding in diagnosis.findings:
        rule = RULE_BY_ID.get(finding.id)
        if finding.not_measured or finding.time_lost_method not in METHODS or rule is None:
            continue
        switch = switch_for(rule.switches, config)
        correction = found.get((switch.name, str(finding.time_lost_method))) if switch else None
        if switch is not None and correction is not None:
            _correct(finding, switch, correction, diagnosis.timing, analyzed.baseline_step_ms)
            corrected.append(f"{finding.id} ({switch.name} x{fmt(correction.ratio)})")
    error_pct, entries = median_error_pct(by_fix)
    device = history.get("device") or "this GPU"
    error = (
        f"the predictions' median error over the {entries} fix(es) verified on {device} is {fmt(error_pct)}%"
        if error_pct is not None
        else f"no fix verified on {device} realized a saving yet"
    )
    if corrected:
        diagnosis.limitations.append(
            f"Savings corrected by what verified runs realized on this GPU: {', '.join(corrected)}; {error}."
        )
    elif not (analyzed.verified or {}).get("fixes"):
        # A run that verified fixes itself says the same in its replay error line, with its own fixes counted
        # (dataloader_eval_loop on the H100 read "81% over 2 verified fixes" there and "95.2% over 1" here).
        diagnosis.limitations.append(
            f"No saving corrected by verified runs: a fix's predictions are corrected once {MIN_RUNS} runs "
            f"on this GPU verified it, and none of this run's fixes has as many; {error}."
        )


def _correct(
    finding: Finding, switch: Switch, correction: Correction, timing: dict, baseline_ms: float | None
) -> None:
    # A fix that on this GPU made the step slower saves nothing; no correction saves more than the step.
    scale = max(0.0, correction.ratio)
    step_ms = timing.get("step_time_ms")
    before: dict[str, Any] = {
        "fix": switch.name,
        "method": finding.time_lost_method,
        "ratio": correction.ratio,
        "ratios": list(correction.ratios),
        "time_lost_ms": finding.time_lost_ms,
        "time_lost_baseline_ms": finding.time_lost_baseline_ms,
        "time_lost_baseline_range_ms": finding.time_lost_baseline_range_ms,
        "replay_reason": finding.replay_reason,
    }
    finding.correction = before
    finding.time_lost_ms = min(finding.time_lost_ms * scale, step_ms or float("inf"))
    finding.time_lost_pct = 100.0 * finding.time_lost_ms / step_ms if step_ms else 0.0
    if finding.time_lost_baseline_ms is not None:
        finding.time_lost_baseline_ms = min(
            finding.time_lost_baseline_ms * scale, baseline_ms or float("inf")
        )
    if finding.time_lost_baseline_range_ms is not None:
        finding.time_lost_baseline_range_ms = [
            min(edge * scale, baseline_ms or float("inf")) for edge in finding.time_lost_baseline_range_ms
        ]
    predicted = before["time_lost_baseline_ms"] or before["time_lost_ms"]
    made = "the replay" if before["method"] == "replay" else "the rule's closed form"
    finding.time_lost_method = METHOD
    finding.replay_reason = (
        f"{correction.reason}: {switch.description} realized "
        f"{', '.join(f'{fmt(r)}x' for r in correction.ratios)} the predicted saving in those runs; {made} "
        f"alone predicts {fmt(predicted)} ms"
        + (f" (not replayed: {before['replay_reason']})" if before["method"] == "model" else "")
    )
    finding.evidence.append(Evidence("verified correction", finding.replay_reason, "", ESTIMATED))
