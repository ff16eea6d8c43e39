"""What the fixes `hybrid run --verify` switched on realized (hybrid.collect.verify ran them): each fix's
plain window against the run's own plain step, and the loss at the window's last step against the loss at the
same step of the plain window without the fix. Read from the run directory's records, so `hybrid report
DIR` shows them again; the stage `attach_verified` puts each beside the finding's predicted saving."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping

from hybrid.analysis.diagnosis import Analyzed, Diagnosis
from hybrid.files import read_regular_text
from hybrid.rules.advice import RunConfig
from hybrid.rules.switches import SWITCHES
from hybrid.rundir import RunDir

# The loss after a fix counts as unchanged within 1% of the loss without it (relative). The check is
# there to catch a fix that breaks training (a non-finite loss, a different data stream), not to certify
# equal bits: TF32 and bf16 change the loss by design, by how much each run's `numerics` shows.
NUMERICS_RTOL = 0.01
# Why a loss changes under DataLoader workers whatever the fix's numerics: each worker seeds its own torch and
# random generators, so random transforms draw other numbers than in the training process (a torchvision
# loop's random crops and flips: 3.3% and 6.4% apart in two runs; items without randomness: equal).
LOADER_WORKERS_RANDOMNESS = (
    "DataLoader workers draw random transforms from generators seeded per worker, not the training "
    "process's, so a loop with random augmentation trains on other batches"
)
# A fix that realizes nothing would have an infinite relative error: the error's denominator is at least
# this share of the plain step.
ERROR_FLOOR_PCT = 1.0
LOSS_FILE = "loss.json"  # hybrid.inject.numerics writes it
FIX_FILE = "fix.json"  # hybrid.inject.apply_fix writes it
SWITCH_BY_NAME = {switch.name: switch for switch in SWITCHES}


def _read_json(path) -> dict:
    try:
        data = json.loads(read_regular_text(path))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def plain_reference(run: RunDir) -> dict | None:
    """The run's plain step the fixes are compared with: its step time, the warmup before it and its steps
    (a fix's run drops as many and measures as many, so its last step is the same step of the script), and
    the folder whose loss.json holds its losses. None without a plain step."""
    passes = run.run_json().get("passes") or []
    plain = next((p for p in passes if p["name"] == "plain" and p.get("status") == "ok"), None)
    if plain is None or not plain.get("step_time_ms"):
        return None
    if plain.get("process") == "torch":  # the window the torch pass's process timed before its profiler
        inject = run.read_inject("torch") or {}
        steps = (inject.get("plain_window") or {}).get("measured_steps")
        folder = "torch"
    else:
        inject = run.read_inject("plain") or {}
        steps = inject.get("measured_steps")
        folder = "plain"
    warmup = inject.get("warmup_dropped")
    if not isinstance(steps, int) or not isinstance(warmup, int) or steps < 1:
        return None
    return {
        "step_ms": float(plain["step_time_ms"]),
        "warmup": warmup,
        "steps": steps,
        "folder": folder,
        "step_unit": _unit(inject),
    }


def _unit(inject: dict) -> str | None:
    """What one step is (its source and unit, without the count per library call the unit may add)."""
    unit = inject.get("step_unit")
    return f"{inject.get('step_source')}: {str(unit).split(',')[0]}" if unit else None


def _loss(run: RunDir, folder: str, step: int) -> tuple[float | None, dict]:
    record = _read_json(run.path / folder / LOSS_FILE)
    value = (record.get("losses") or {}).get(str(step))
    return (float(value) if isinstance(value, (int, float)) else None), record


def numerics(run: RunDir, reference: dict, folder: str, last_step: int) -> dict:
    """Whether the loss at the fix's last plain step differs from the loss at the same step without it by
    more than NUMERICS_RTOL; "not measured" with the reason where either was not captured."""
    before, before_record = _loss(run, reference["folder"], last_step)
    after, after_record = _loss(run, folder, last_step)
    out: dict = {"step": last_step, "tolerance": NUMERICS_RTOL, "loss_before": before, "loss_after": after}
    if not after_record or not before_record:
        return {**out, "status": "not measured", "reason": "no loss was captured (loss.json is missing)"}
    if not after_record.get("backward_calls"):
        return {
            **out,
            "status": "not measured",
            "reason": "inference",  # no .backward() call in the plain steps: no loss to compare
        }
    if before is None or after is None:
        return {
            **out,
            "status": "not measured",
            "reason": f"the loss of step {last_step} was not captured in both runs (a non-scalar backward)",
        }
    if not math.isfinite(after) or not math.isfinite(before):
        return {**out, "status": "changed", "reason": "the loss is not finite"}
    change = abs(after - before) / max(abs(before), 1e-12)
    return {**out, "relative_change": change, "status": "unchanged" if change <= NUMERICS_RTOL else "changed"}


def realized(run: RunDir, record: dict, reference: dict) -> dict:
    """One verified fix: its plain step against the run's, the saving that makes, the numerics, and what
    the fix did; status "realized", "unsettled" (paired windows whose fix-off window strays from the plain
    step, or whose fix-on windows differ by more than the saving: its figures and the reason, not a
    saving), "failed" (the run failed: its reason) or "not applied" (the fix found nothing to act on, the
    script switched it off again, or its run shows it changed nothing: Switch.ineffective)."""
    folder = str(record.get("pass"))
    out = {
        "fix": record.get("fix"),
        "description": record.get("description"),
        "pass": folder,
        "step_before_ms": reference["step_ms"],
    }
    if record.get("status") != "ok":
        return {**out, "status": "failed", "reason": record.get("reason") or "the run failed"}
    inject = run.read_inject(folder) or {}
    after_ms = inject.get("step_time_ms")
    if not after_ms:
        return {**out, "status": "failed", "reason": "the run measured no step"}
    unit, reference_unit = _unit(inject), reference.get("step_unit")
    if unit and reference_unit and unit != reference_unit:
        # A step of another unit is no saving: on the H200, launch_batch1_deep_mlp's diagnosis stepped on one
        # batch-1 forward (1.32 ms) before the script's first mark, its compiled fix run on the script's
        # mark_step (64 forwards, 87.6 ms), which read as an 86 ms loss.
        return {
            **out,
            "status": "failed",
            "reason": f"the fix run stepped on {unit}, the diagnosis on {reference_unit}: not comparable",
            "step_after_ms": float(after_ms),
        }
    applied = _read_json(run.path / folder / FIX_FILE)
    actions, passed_over = applied.get("actions") or [], applied.get("left_as_built") or []
    out["actions"] = actions
    timed = paired_windows(applied["paired"]) if "paired" in applied else None
    if "paired" in applied and timed is None and actions:
        # The flag is off in the middle window: a script that ends there also ends with it off.
        return {
            **out,
            "status": "failed",
            "reason": "the script ended before the windows with the fix off and on again were timed",
        }
    switch = SWITCH_BY_NAME.get(str(record.get("fix")))
    fix_config = RunConfig(inject.get("config") or {})
    held = switch.is_on(fix_config) if switch is not None else None
    if not actions or held is False:
        if actions:
            why = "the setting was off again at the window's end (the script sets it itself)"
        elif passed_over:
            why = "left as built: " + "; ".join(passed_over)
        else:
            why = "the script built nothing the fix acts on"
        return {**out, "status": "not applied", "reason": why, "step_after_ms": float(after_ms)}
    ineffective = switch.ineffective(fix_config) if switch is not None else None
    if ineffective:
        return {**out, "status": "not applied", "reason": ineffective, "step_after_ms": float(after_ms)}
    last_step = reference["warmup"] + reference["steps"] - 1
    if timed is not None:
        reason = _unsettled_reason(timed, reference["step_ms"])
        return {
            **out,
            "status": "unsettled" if reason else "realized",
            **({"reason": reason} if reason else {}),
            "step_before_ms": timed["off_ms"],
            "step_after_ms": timed["on_ms"],
            "realized_ms": timed["off_ms"] - timed["on_ms"],
            "paired": {**timed, "plain_step_ms": reference["step_ms"]},
            "numerics": numerics(run, reference, folder, last_step),
        }
    compared = numerics(run, reference, folder, last_step)
    if record.get("fix") == "loader_workers" and compared["status"] == "changed":
        compared["reason"] = LOADER_WORKERS_RANDOMNESS
    return {
        **out,
        "status": "realized",
        "step_after_ms": float(after_ms),
        "realized_ms": reference["step_ms"] - float(after_ms),
        "numerics": compared,
    }


# A paired run's window with the fix off runs as the plain pass did (no collector, the same setting, another
# process): a reading that far from the plain step is the window's own, not the fix's. Processes of one
# script differ by up to 11% (hf_trainer_gpt2: 16.6 to 18.5 ms a step in six on the H200); on an H100 the
# torchvision detection eval's off window, entered cold after the TF32-on warmup, ran 25.6 ms a step where
# the plain pass ran 19.8 ms, and its two on windows 20.2 and 19.4: a 5.9 ms "saving" of a fix that moved
# the step by 0.1 ms against the plain pass.
UNSETTLED_OFF_SHARE = 0.2


def _unsettled_reason(timed: dict, plain_ms: float) -> str | None:
    """Why a paired reading is not the fix's saving, or None: its window with the fix off strays over
    UNSETTLED_OFF_SHARE from the plain step, or its two windows with the fix on differ by more than the
    saving read between off and on (resnet50's compile on an H100: on 35.1 and 29.3 ms, off 37.7: a 5.45 ms
    saving inside 5.78 ms of noise, benchmarks/results/s24_h100)."""
    off_ms, saving_ms, spread_ms = timed["off_ms"], timed["off_ms"] - timed["on_ms"], timed["spread_ms"]
    if abs(off_ms - plain_ms) > UNSETTLED_OFF_SHARE * plain_ms:
        direction = "slower" if off_ms > plain_ms else "faster"
        return (
            f"the window with the fix off ran {abs(off_ms - plain_ms):.3g} ms a step {direction} than the "
            f"plain pass with the same setting ({off_ms:.3g} vs {plain_ms:.3g} ms, over "
            f"{UNSETTLED_OFF_SHARE:.0%} apart): the difference between the windows is not read as the fix's "
            "saving"
        )
    if spread_ms > abs(saving_ms):
        return (
            f"the two windows with the fix on ran {spread_ms:.3g} ms a step apart, more than the "
            f"{saving_ms:.3g} ms between the windows off and on: the saving is inside the run's noise"
        )
    return None


def paired_windows(paired: dict) -> dict | None:
    """A paired run's step with the fix off and on (ms a step, the on windows' steps pooled) and how far its
    two on windows were apart (`spread_ms`, the in-process noise the saving is read against); None unless
    every window was timed (hybrid.inject.apply_fix PAIRED_ORDER)."""
    windows = [w for w in paired.get("segments") or [] if isinstance(w, dict)]
    timed = [w for w in windows if isinstance(w.get("ms"), (int, float)) and w.get("steps")]
    if not windows or len(timed) != len(windows) or {bool(w["fix_on"]) for w in timed} != {True, False}:
        return None
    on = [w for w in timed if w["fix_on"]]
    off = [w for w in timed if not w["fix_on"]]
    per_step = [w["ms"] / w["steps"] for w in on]
    return {
        "on_ms": sum(w["ms"] for w in on) / sum(w["steps"] for w in on),
        "off_ms": sum(w["ms"] for w in off) / sum(w["steps"] for w in off),
        "spread_ms": max(per_step) - min(per_step),
        "windows_ms": [w["ms"] / w["steps"] for w in timed],
    }


def verified_fixes(run: RunDir) -> dict | None:
    """Each fix the run verified, realized, with the findings it was verified for and their predictions at
    the time; the history of this GPU as it stood then. None where the run verified nothing."""
    block = run.run_json().get("verify")
    if not isinstance(block, dict):
        return None
    reference = plain_reference(run)
    fixes = []
    for record in block.get("fixes") or []:
        if not isinstance(record, dict):
            continue
        result = (
            realized(run, record, reference)
            if reference is not None
            else {"fix": record.get("fix"), "status": "failed", "reason": "the run has no plain step"}
        )
        fixes.append({**result, "findings": list(record.get("findings") or [])})
    return {**block, "fixes": fixes}


def within_reach(outcome: dict, reach_ms: float | None) -> dict:
    """A realized fix whose saving, less its on windows' spread, exceeds the time of every kernel it can
    change (`reach_ms`, its switch's `reach` metric) is "beyond reach": the windows differ by more than the
    fix can, so the difference is not read as its saving. On an H100, TF32 "saved" 3.94 ms a step of the
    torchvision detector (off 20.0 -> on 16.1 ms) whose FP32 GEMMs and convolutions take 3.65 ms a step:
    its off window ran 1.9 ms slower than the plain pass with the same setting."""
    if outcome.get("status") != "realized" or reach_ms is None:
        return outcome
    spread_ms = float((outcome.get("paired") or {}).get("spread_ms") or 0.0)
    realized_ms = float(outcome["realized_ms"])
    if realized_ms - spread_ms <= reach_ms:
        return outcome
    return {
        **outcome,
        "status": "beyond reach",
        "reach_ms": reach_ms,
        "reason": (
            f"it saved {realized_ms:.3g} ms a step, more than the {reach_ms:.3g} ms a step of the kernels it "
            "can change: the windows differ by more than the fix (noise between them, or work that "
            "depends on the results), so the difference is not read as the fix's saving"
        ),
    }


def reach_ms(fix_name: str | None, metrics: Mapping[str, object]) -> float | None:
    """The time a step spends in the kernels the named fix can change (its switch's `reach` metric, from
    `metrics` as the analysis holds them or as results.json writes them), None where the switch reaches
    further or the metric is missing."""
    switch = SWITCH_BY_NAME.get(str(fix_name))
    if switch is None or not switch.reach:
        return None
    metric = metrics.get(switch.reach)
    value = metric.get("value") if isinstance(metric, dict) else getattr(metric, "value", None)
    return float(value) if isinstance(value, (int, float)) else None


def relative_error(predicted_ms: float, realized_ms: float, step_ms: float) -> float:
    """|realized - predicted| / realized, the denominator at least ERROR_FLOOR_PCT of the plain step."""
    return abs(realized_ms - predicted_ms) / max(abs(realized_ms), step_ms * ERROR_FLOOR_PCT / 100.0)


def _predicted(finding) -> float:
    """A finding's saving on the plain step (the figure a fix's run is measured against)."""
    return float(
        finding.time_lost_baseline_ms if finding.time_lost_baseline_ms is not None else finding.time_lost_ms
    )


def attach_verified(diagnosis: Diagnosis, analyzed: Analyzed) -> None:
    """Give each verified finding `verify`: the fix, its predicted saving on the plain step (the figure the
    fix's run is measured against), the realized one, both step times and the numerics; and the diagnosis
    a summary: how far the predictions were from what this run realized, and this GPU's history."""
    block = analyzed.verified
    if not block:
        return
    errors: list[float] = []
    block = {
        **block,
        "fixes": [
            within_reach(fix, reach_ms(fix.get("fix"), analyzed.metrics)) for fix in block.get("fixes") or []
        ],
    }
    for fix in block.get("fixes") or []:
        verified = [f for f in diagnosis.findings if f.id in fix.get("findings", [])]
        # One switch can remove several findings' time (torch.compile pads misaligned GEMMs and fuses the
        # elementwise chains): what it realizes is compared with the sum of their predictions.
        fix_predicted = sum(_predicted(f) for f in verified)
        for finding in verified:
            finding.verify = {key: value for key, value in fix.items() if key not in ("findings",)} | {
                "predicted_ms": _predicted(finding)
            }
            if len(verified) > 1:
                finding.verify["fix_predicted_ms"] = fix_predicted
                finding.verify["fix_findings"] = [f.id for f in verified]
            if finding.correction is not None:
                # The prediction shown is corrected by this GPU's history: the uncorrected one beside it.
                finding.verify["uncorrected_ms"] = (
                    finding.correction["time_lost_baseline_ms"] or finding.correction["time_lost_ms"]
                )
        if verified and fix.get("status") == "realized":
            errors.append(relative_error(fix_predicted, fix["realized_ms"], fix["step_before_ms"]))
    diagnosis.verify_summary = {
        "requested": block.get("requested"),
        "fixes": len(block.get("fixes") or []),
        "realized": sum(1 for f in block.get("fixes") or [] if f.get("status") == "realized"),
        "skipped": block.get("skipped") or [],
        "median_error_pct": 100.0 * statistics.median(errors) if errors else None,
        "error_findings": len(errors),
        "gpu_history": block.get("history"),
    }
