"""The words of `hybrid run --verify` in every renderer: a verified finding's realized saving, which leads its
figures, and the replay's error on this GPU. Read from the results document only."""

from __future__ import annotations

from hybrid.report.units import format_value, is_number


def verify_line(finding: dict) -> str | None:
    """'realized 18.2 ms/step with DataLoader workers [measured: plain runs 35.1 -> 16.9 ms/step];
    predicted 32 ms; loss unchanged (+0.02% at step 14)', or why the fix was not realized; None where the
    finding was not verified."""
    verify = finding.get("verify")
    if not isinstance(verify, dict):
        return None
    what = str(verify.get("description") or verify.get("fix") or "the fix")
    status = verify.get("status")
    if status != "realized":
        return f"verify: {what} {status or 'failed'}: {verify.get('reason') or 'no reason recorded'}"
    before = format_value(verify.get("step_before_ms"), "ms")
    after = format_value(verify.get("step_after_ms"), "ms")
    paired = verify.get("paired")
    measured = (
        f"one plain run, off then on: {before} -> {after}/step, the on windows "
        f"{format_value(paired.get('spread_ms'), 'ms')} apart"
        if isinstance(paired, dict)
        else f"plain runs {before} -> {after}/step"
    )
    shared = verify.get("fix_predicted_ms")
    spread = range_note(finding, {})
    predicted = (
        format_value(verify.get("predicted_ms"), "ms")
        + (f" ({spread[1]})" if spread else "")
        + (
            f" ({format_value(shared, 'ms')} with the other findings it fixes: "
            f"{', '.join(f for f in verify.get('fix_findings') or [] if f != finding.get('id'))})"
            if is_number(shared)
            else ""
        )
    )
    line = (
        f"realized {format_value(verify.get('realized_ms'), 'ms')}/step with {what} [measured: {measured}]; "
        f"predicted {predicted}"
    )
    return f"{line}; {_numerics(verify.get('numerics') or {})}"


def figure_note(finding: dict) -> tuple[str, str] | None:
    """("not replayed", why) beside a closed-form figure, ("corrected", by what) beside a replay corrected by
    the fixes verified on this GPU (hybrid.replay.corrected); None beside the replay's own figure."""
    label = {"model": "not replayed", "corrected": "corrected"}.get(str(finding.get("time_lost_method")))
    reason = finding.get("replay_reason")
    return (label, str(reason)) if label and reason else None


# A saving range is said where an edge lies further from the figure than the ±20% the predictions are
# scored at (issue 23's goal): the host's plain speed alone could then decide whether the figure holds.
RANGE_SHOWN_PCT = 20.0


def range_note(finding: dict, timing: dict) -> tuple[str, str] | None:
    """("range", "803 µs to 1.44 ms at the host speeds that replay the plain step (0.67-0.84 of the
    profiled host's time)") where the fitted host range moves the finding's plain-step saving more than
    RANGE_SHOWN_PCT; None elsewhere."""
    edges = finding.get("time_lost_baseline_range_ms")
    figure = finding.get("time_lost_baseline_ms")
    if not (isinstance(edges, list) and len(edges) == 2 and all(map(is_number, [figure, *edges]))):
        return None
    low, high, figure = float(edges[0]), float(edges[1]), float(figure or 0.0)
    if figure <= 0 or max(figure - low, high - figure) <= RANGE_SHOWN_PCT / 100 * figure:
        return None
    hosts = timing.get("replay_host_scale_range")
    of_host = (
        f" ({hosts[0]:.2f}-{hosts[1]:.2f} of the profiled host's time)"
        if isinstance(hosts, list) and len(hosts) == 2 and all(is_number(h) for h in hosts)
        else ""
    )
    span = f"{format_value(low, 'ms')} to {format_value(high, 'ms')}"
    return "range", f"{span} at the host speeds that replay the plain step{of_host}"


def _numerics(numerics: dict) -> str:
    status = numerics.get("status") or "not measured"
    change = numerics.get("relative_change")
    if isinstance(change, (int, float)):
        step, tolerance = numerics.get("step"), numerics.get("tolerance")
        reason = f": {numerics['reason']}" if numerics.get("reason") else ""
        return (
            f"loss {status} ({format_value(100.0 * float(change), '%')} at step {step}; tolerance "
            f"{format_value(100.0 * float(tolerance or 0), '%')}){reason}"
        )
    return f"loss {status}" + (f": {numerics['reason']}" if numerics.get("reason") else "")


def replay_error_line(results: dict) -> str | None:
    """'replay error on this GPU (NVIDIA H200): median |realized - predicted| / realized = 12% over 9 verified
    fixes (this run: 8% over 3); applied to later predictions of loader_workers (replay) 0.93x over 3 runs',
    where the run verified fixes ('prediction error on this machine (no GPU)' without a GPU)."""
    summary = (results.get("diagnosis") or {}).get("verify_summary")
    if not isinstance(summary, dict):
        return None
    if not summary.get("fixes"):
        return "--verify: nothing run, as no finding's fix is one hybrid can switch on itself in this run"
    history = summary.get("gpu_history") or {}
    # Without a GPU (history key "cpu") the predictions are the rules' closed-form estimates: no replay ran.
    on_cpu = history.get("device") == "cpu"
    what = "prediction error on this machine (no GPU)" if on_cpu else "replay error on this GPU"
    this_run = (
        f"this run: {format_value(summary.get('median_error_pct'), '%')} over {summary.get('error_findings')}"
        if is_number(summary.get("median_error_pct"))
        else "none realized in this run"
    )
    if is_number(history.get("median_error_pct")):
        device = "" if on_cpu else f" ({history.get('device')})"
        gpu = (
            f"{what}{device}: median |realized - predicted| / realized = "
            f"{format_value(history.get('median_error_pct'), '%')} over {history.get('verified')} verified "
            f"fixes ({this_run})"
        )
    else:
        gpu = f"{what}: no verified fix realized yet ({this_run})"
    applied = history.get("applied")
    if isinstance(applied, list) and applied:
        used = ", ".join(
            f"{entry.get('fix')} ({entry.get('method')}) {format_value(entry.get('ratio'), 'x')} over "
            f"{entry.get('runs')} runs"
            for entry in applied
            if isinstance(entry, dict)
        )
        return f"{gpu}; applied to later predictions of {used}"
    # When corrections start, not how they work (a fix's realized/predicted ratio, which the line above
    # names once applied): 3 -> 2 lines on verify/hf_trainer_tf32_paired.
    runs = history.get("min_runs")
    return f"{gpu}; not applied to predictions until a fix is verified " + (
        f"{runs} times" if runs else "in several runs"
    )


def skipped_line(results: dict) -> str | None:
    """'not verified: tensor.fp32_gemm (TF32 ...: already on in this run)' for the findings --verify passed
    over although their rule has switches."""
    summary = (results.get("diagnosis") or {}).get("verify_summary")
    skipped = summary.get("skipped") if isinstance(summary, dict) else None
    if not skipped:
        return None
    return "not verified: " + "; ".join(f"{s.get('finding')} ({s.get('reason')})" for s in skipped)
