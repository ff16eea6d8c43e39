"""Two results of the same workload side by side (before/after a change, or in CI against a baseline):
step time, GPU utilization, roofline position, top kernels, and findings matched by rule id.

The comparison says no more than the two documents support:
- the step-time change is a test of the two means (hybrid.step_test: Welch's t on the steps,
  with a 95% confidence interval), on the plain pass's steps where both runs have one (a collector
  inflates step times: TF32 on reads -29% by the profiled resnet50 steps, -46% by the plain ones);
- percentages (GPU utilization, share of attainable) change in percentage points;
- a finding of run A that run B does not report is "resolved" only when B measured what the finding
  rests on; otherwise it is "not checked in B" (and likewise "new" needs A to have measured it);
- a kernel outside one run's stored top kernels is "not stored" there, told apart from "gone" or "new";
- runs of different programs, models, batch sizes or devices, or exports that do not record their
  program and share little of their kernel time, are named in `workload.differences` (the CLI refuses
  them unless told), and every figure the gate reads is checked first (`problems`)."""

from __future__ import annotations

import math

from hybrid import step_test
from hybrid.report.common import findings_by_impact, format_value, source_label
from hybrid.report.kernel_labels import distinct_labels
from hybrid.report.safe_text import escape_strings
from hybrid.report.units import format_change_pct, format_pp, is_number

TOP_KERNELS_COMPARED = 10  # the union of each run's top kernels, by time per step
KERNEL_LABEL_WIDTH = 72  # a kernel's name on a comparison line, before its figures
# The analysis stores this many top kernels (hybrid.analysis.tables.top_kernels): a shorter list is every
# kernel.
TOP_KERNELS_STORED = 10
# Exports made outside hybrid do not record their program: two are taken as the same program when at least
# this share of each one's stored top-kernel time is in kernels the other also ran. Unrelated bare H200
# exports share at most SHARED_KERNEL_CHECK (tests/test_report_compare.py measures it).
SAME_PROGRAM_KERNEL_SHARE_PCT = 50.0


def _section(results: dict, key: str) -> dict:
    """One section of a document that may not be a results.json at all (the gate must still decide)."""
    value = results.get(key)
    return value if isinstance(value, dict) else {}


def _number(value: object) -> float | None:
    return float(value) if is_number(value) and math.isfinite(float(value)) else None


def _change(before: object, after: object, *, percent: bool = False) -> dict:
    """a, b and their difference; `percent`: the values are percentages, so the change is in points."""
    a, b = _number(before), _number(after)
    change = {"a": a, "b": b, "delta": None, "delta_pct": None}
    if a is not None and b is not None:
        change["delta"] = b - a
        if a and not percent:
            change["delta_pct"] = (b - a) / a * 100
    if percent:
        change["delta_pp"] = change.pop("delta")
        change.pop("delta_pct")
    return change


# No measured step lasts 11.6 days: a larger figure is damage, and would overflow the test's sums of squares.
MAX_STEP_MS = 1e9


def _positive(value: object) -> bool:
    """A duration a measurement can give: a finite number of ms above 0 and under MAX_STEP_MS."""
    return _number(value) is not None and 0 < float(value) < MAX_STEP_MS


def timing_problems(results: dict) -> list[str]:
    """Every figure the step comparison and the gate read that no measurement can give: a step time or a
    step sample that is not a positive number, a negative spread, a step count below one, samples whose
    mean is not the step time the document states (a hand-edited file)."""
    timing, workload = _section(results, "timing"), _section(results, "workload")
    problems = []
    for key in ("step_time_ms", "baseline_step_time_ms"):
        if timing.get(key) is not None and not _positive(timing[key]):
            problems.append(
                f"timing.{key} is {timing[key]!r}: a step time is a positive number of ms "
                f"under {MAX_STEP_MS:.0e}"
            )
    std = timing.get("step_time_std_ms")
    if std is not None and (_number(std) is None or not 0 <= float(std) < MAX_STEP_MS):
        problems.append(f"timing.step_time_std_ms is {std!r}: a spread is a number of ms, 0 or more")
    count = workload.get("steps_measured")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        problems.append(
            f"workload.steps_measured is {count!r}: a count of steps is a whole number, 1 or more"
        )
    for key, mean_key in (
        ("step_times_ms", "step_time_ms"),
        ("baseline_step_times_ms", "baseline_step_time_ms"),
    ):
        samples = timing.get(key)
        if samples is None:
            continue
        if not isinstance(samples, list) or not all(_positive(x) for x in samples):
            problems.append(f"timing.{key} holds values that are not positive numbers of ms")
            continue
        stated = timing.get(mean_key)
        if samples and _positive(stated) and abs(math.fsum(samples) / len(samples) - stated) > 0.01 * stated:
            problems.append(
                f"timing.{key} average {math.fsum(samples) / len(samples):.4g} ms, but "
                f"timing.{mean_key} says {stated:.4g} ms: one of them was changed"
            )
    return problems


def _steps(results: dict, basis: str) -> step_test.Steps | None:
    """One run's steps for the test: its samples where the document keeps them, else the mean, spread and
    count it states (documents before the samples were kept); None where a valid figure is missing."""
    if timing_problems(results):
        return None
    timing, workload = _section(results, "timing"), _section(results, "workload")
    if basis == "plain":
        return step_test.from_samples(timing.get("baseline_step_times_ms") or [], "plain", robust=True)
    if timing.get("step_times_ms"):
        return step_test.from_samples(timing["step_times_ms"], "profiled")
    mean, std = _number(timing.get("step_time_ms")), _number(timing.get("step_time_std_ms"))
    count = workload.get("steps_measured")
    if mean is None or std is None or not isinstance(count, int):
        return None
    excluded = timing.get("steps_excluded")
    count -= excluded if isinstance(excluded, int) and 0 <= excluded < count else 0
    return step_test.from_summary(mean, std, count, "profiled")


def step_change(a: dict, b: dict) -> dict:
    """Step time of each run and the test of their means: `test` (hybrid.step_test.welch) and its
    `verdict`, "slower", "faster", "no significant change" or "unknown" (a step time or its spread is
    missing). On the plain pass's steps where both runs recorded them (`basis`), else the profiled steps."""
    timing_a, timing_b = _section(a, "timing"), _section(b, "timing")
    valid_a, valid_b = not timing_problems(a), not timing_problems(b)
    plain = [_steps(a, "plain"), _steps(b, "plain")]
    basis = "plain" if all(plain) else "profiled"
    key = "baseline_step_time_ms" if basis == "plain" else "step_time_ms"
    change = _change(timing_a.get(key) if valid_a else None, timing_b.get(key) if valid_b else None)
    steps = plain if basis == "plain" else [_steps(a, "profiled"), _steps(b, "profiled")]
    change["basis"] = basis
    change["test"] = step_test.welch(*steps) if all(steps) and change["delta"] is not None else None
    # The same steps on both sides (a document against itself): no noise can hide anything.
    change["identical"] = all(steps) and steps[0] == steps[1]
    if change["delta"] is None:
        change["verdict"] = "unknown"
    elif change["test"] is None:
        change["verdict"] = "unchanged" if change["delta"] == 0 else "unknown"
    else:
        change["verdict"] = step_test.verdict(change["test"])
    if basis == "profiled" and all(_positive(t.get("baseline_step_time_ms")) for t in (timing_a, timing_b)):
        # Both ran a plain pass, but a document from before the samples were kept has only its mean.
        change["plain"] = _change(timing_a["baseline_step_time_ms"], timing_b["baseline_step_time_ms"])
    if basis == "plain" and valid_a and valid_b:
        # What the collector's own steps say, beside: the difference is its overhead changing.
        change["profiled"] = _change(timing_a.get("step_time_ms"), timing_b.get("step_time_ms"))
    return change


def _identity(results: dict) -> dict:
    workload, device = _section(results, "workload"), _section(results, "device")
    command = workload.get("command")
    words = command.split() if isinstance(command, str) else [str(w) for w in command or []]
    # The program: a script's path, or `-m module [name]` for a module such as hybrid.models resnet50. An
    # export made outside hybrid (`nsys export NAME.sqlite`) does not record the program it profiled.
    foreign = words[:2] == ["nsys", "export"]
    program = None if foreign else " ".join(words[:3] if words[:1] == ["-m"] else words[:1]) or None
    return {
        "model": workload.get("model"),
        "program": program,
        "foreign": foreign,
        "command": " ".join(words) or None,
        "batch_size": workload.get("batch_size"),
        "device": device.get("name"),
        "mode": results.get("mode"),
    }


def _kernel_times(results: dict) -> dict[str, float]:
    kernels = results.get("top_kernels") if isinstance(results.get("top_kernels"), list) else []
    return {
        k["name"]: float(k["total_ms_per_step"])
        for k in kernels
        if isinstance(k, dict) and isinstance(k.get("name"), str) and _positive(k.get("total_ms_per_step"))
    }


def shared_kernel_pct(a: dict, b: dict) -> float | None:
    """The smaller of the two runs' shares of stored top-kernel time spent in kernels the other run also
    ran (its stored list or its timeline's names); None when a run stores no kernel times."""
    shares = []
    for own, other in ((a, b), (b, a)):
        times = _kernel_times(own)
        if not times:
            return None
        shared = sum(ms for name, ms in times.items() if _presence(other, name) in ("stored", "ran"))
        shares.append(100.0 * shared / sum(times.values()))
    return min(shares)


def workload_differences(a: dict, b: dict) -> tuple[list[str], list[str]]:
    """(differences that make the step times incomparable, differences worth a note)."""
    id_a, id_b = _identity(a), _identity(b)
    serious, minor = [], []
    models_known = id_a["model"] is not None and id_b["model"] is not None
    for key, what in (
        ("model", "models"),
        ("program", "programs"),
        ("batch_size", "batch sizes"),
        ("device", "devices"),
    ):
        if key == "program" and models_known:
            continue  # the built-in workloads share one program; their model names them
        if id_a[key] is not None and id_b[key] is not None and id_a[key] != id_b[key]:
            serious.append(f"{what} differ ({id_a[key]} vs {id_b[key]})")
    if not models_known and (id_a["foreign"] or id_b["foreign"]) and not serious:
        shared = shared_kernel_pct(a, b)
        unknown = " and ".join(side for side, ident in (("A", id_a), ("B", id_b)) if ident["foreign"])
        if shared is None or shared < SAME_PROGRAM_KERNEL_SHARE_PCT:
            kernels = (
                "no kernel times to match"
                if shared is None
                else f"only {shared:.0f}% of one run's top-kernel time is in kernels the other ran"
            )
            serious.append(
                f"programs cannot be told the same: {unknown} does not record its program "
                f"(an export made outside hybrid) and {kernels}"
            )
        else:
            minor.append(
                f"{unknown} does not record its program: taken as the same program because "
                f"{shared:.0f}% of each run's top-kernel time is in kernels both ran"
            )
    if not serious and id_a["command"] != id_b["command"] and None not in (id_a["command"], id_b["command"]):
        minor.append(f"commands differ: {id_a['command']} vs {id_b['command']}")
    if id_a["mode"] != id_b["mode"]:
        minor.append(
            f"modes differ ({id_a['mode']} vs {id_b['mode']}): the step times come from different "
            "collectors and their overheads differ"
        )
    return serious, minor


def _evidence_metrics(results: dict, finding: dict) -> list[str]:
    """Names of the measured quantities a finding's evidence shows (same value, unit and source). Lists
    of names (the FP32 layers, the ops) are left out: a run with nothing to list has no such metric,
    which is no missing measurement."""
    metrics = _section(results, "metrics")
    names = []
    for item in finding.get("evidence") or []:
        if not is_number(item.get("value")):
            continue
        for name, metric in metrics.items():
            if (
                (metric or {}).get("value") == item.get("value")
                and metric.get("unit") == item.get("unit")
                and metric.get("source") == item.get("source")
                and item.get("value") not in (None, "", 0)
            ):
                names.append(name)
                break
    return names


def _lacks(results: dict, metric_names: list[str]) -> list[str]:
    metrics = _section(results, "metrics")
    return [
        n
        for n in metric_names
        if not isinstance(metrics.get(n), dict) or metrics[n].get("value") in (None, "")
    ]


def _summary(finding: dict) -> dict:
    return {"id": finding.get("id"), "title": finding.get("title"), "severity": finding.get("severity")}


def _findings_of(results: dict) -> list[dict]:
    diagnosis = _section(results, "diagnosis")
    if not isinstance(diagnosis.get("bottlenecks"), list):
        return []
    bottlenecks = [f for f in diagnosis["bottlenecks"] if isinstance(f, dict) and "id" in f]
    return findings_by_impact({"diagnosis": {"bottlenecks": bottlenecks}})


def _findings(a: dict, b: dict) -> dict:
    before = {f["id"]: f for f in _findings_of(a)}
    after = {f["id"]: f for f in _findings_of(b)}
    out: dict[str, list] = {
        "resolved": [],
        "new": [],
        "unchanged": [],
        "not_checked_in_b": [],
        "not_checked_in_a": [],
    }
    for fid, finding in before.items():
        if fid in after:
            out["unchanged"].append(
                {
                    "id": fid,
                    "title": after[fid].get("title"),
                    "severity_a": finding.get("severity"),
                    "severity_b": after[fid].get("severity"),
                    "time_lost_ms": _change(finding.get("time_lost_ms"), after[fid].get("time_lost_ms")),
                }
            )
            continue
        missing = _lacks(b, _evidence_metrics(a, finding))
        if missing:
            out["not_checked_in_b"].append({**_summary(finding), "missing": missing})
        else:
            out["resolved"].append(_summary(finding))
    for fid, finding in after.items():
        if fid in before:
            continue
        missing = _lacks(a, _evidence_metrics(b, finding))
        out["not_checked_in_a" if missing else "new"].append(
            {**_summary(finding), **({"missing": missing} if missing else {})}
        )
    return out


def _presence(results: dict, name: str) -> str:
    """Whether a kernel ran in a run: "stored" (in its top-kernel list), "ran" (in its step timeline, below
    the stored list), "absent" (the stored list is every kernel, or the timeline holds every event of
    its step, and the kernel is in neither), or "unknown" (it may have run below the stored list)."""
    if name in _kernel_times(results):
        return "stored"
    timeline = _section(results, "timeline")
    names = timeline.get("names") if isinstance(timeline.get("names"), list) else []
    if name in names:
        return "ran"
    stored = results.get("top_kernels") if isinstance(results.get("top_kernels"), list) else []
    events = timeline.get("events") if isinstance(timeline.get("events"), list) else None
    complete_timeline = events is not None and timeline.get("events_total") == len(events)
    return "absent" if len(stored) < TOP_KERNELS_STORED or complete_timeline else "unknown"


def _kernels(a: dict, b: dict) -> list[dict]:
    def totals(results: dict) -> dict:
        kernels = results.get("top_kernels") if isinstance(results.get("top_kernels"), list) else []
        return {
            k["name"]: k.get("total_ms_per_step")
            for k in kernels[:TOP_KERNELS_COMPARED]
            if isinstance(k, dict) and isinstance(k.get("name"), str)
        }

    before, after = totals(a), totals(b)
    names = list(dict.fromkeys([*before, *after]))
    rows = []
    for name in names:
        row = {"name": name, **_change(before.get(name), after.get(name))}
        # Where one run's figure is missing: did the kernel not run there, or was it not stored?
        row["in_a"], row["in_b"] = _presence(a, name), _presence(b, name)
        rows.append(row)
    return sorted(rows, key=lambda row: -max(row["a"] or 0.0, row["b"] or 0.0))


def _roofline(results: dict) -> dict:
    roof = _section(results, "roofline")
    return {
        key: roof.get(key)
        for key in ("bound", "arithmetic_intensity", "achieved_pct_of_attainable", "source")
    }


def compare_results(a: dict, b: dict) -> dict:
    """What changed from run `a` to run `b` (both results documents). `problems`: figures of either run
    that no measurement can give (timing_problems); such a figure is left out of the comparison."""
    serious, minor = workload_differences(a, b)
    timing_a, timing_b = _section(a, "timing"), _section(b, "timing")
    roof_a, roof_b = _roofline(a), _roofline(b)
    return {
        "mode": {"a": a.get("mode"), "b": b.get("mode")},
        "workload": {"a": _identity(a), "b": _identity(b), "same": not serious, "differences": serious},
        "step_time_ms": step_change(a, b),
        "step_time_source": {"a": timing_a.get("source"), "b": timing_b.get("source")},
        "gpu_util_pct": _change(timing_a.get("gpu_util_pct"), timing_b.get("gpu_util_pct"), percent=True),
        "roofline": {
            "a": roof_a,
            "b": roof_b,
            "achieved_pct_of_attainable": _change(
                roof_a["achieved_pct_of_attainable"], roof_b["achieved_pct_of_attainable"], percent=True
            ),
        },
        "top_kernels": _kernels(a, b),
        "findings": _findings(a, b),
        "notes": minor,
        "problems": {"a": timing_problems(a), "b": timing_problems(b)},
    }


def _test_text(test: dict, *, with_change: bool = True) -> str:
    low, high = test["ci_pct"]
    change = f"{format_change_pct(test['delta_pct'])}, " if with_change else ""
    return (
        f"{change}{test['confidence_pct']:g}% CI {format_change_pct(low)} to {format_change_pct(high)}, "
        f"{test['test']} on {test['steps'][0]} vs {test['steps'][1]} {test['basis']} steps"
    )


def gate(diff: dict, pct: float) -> dict:
    """The CI gate on run b against run a: {"outcome": "pass" | "regressed" | "inconclusive", "reason"}.
    Regressed: b is slower at 95% confidence and by an estimated more than `pct` percent. Inconclusive:
    the estimate is above `pct` but the steps' noise could make it, or there is nothing to test (a run
    without a step time or its spread, runs of different workloads). The reason names the figures."""
    if not math.isfinite(pct):
        raise ValueError(f"the regression threshold must be a finite number, not {pct}")
    step = diff["step_time_ms"]
    if diff["workload"]["differences"]:
        differences = "; ".join(diff["workload"]["differences"])
        return {"outcome": "inconclusive", "reason": f"the runs are of different workloads: {differences}"}
    for side, name in (("b", "candidate"), ("a", "baseline")):
        if step[side] is None:
            return {
                "outcome": "inconclusive",
                "reason": f"the {name} has no valid step time (no measured steps, a figure that is not a "
                "positive number, or not a results.json document)",
            }
    test = step["test"]
    if step["delta"] == 0 and step.get("identical"):
        return {"outcome": "pass", "reason": "identical steps in both runs"}
    if test is None:
        if step["delta"] == 0:
            return {"outcome": "pass", "reason": "identical step times"}
        return {
            "outcome": "inconclusive",
            "reason": f"step time {_delta(step, 'ms')}, but a run keeps fewer than two steps or no "
            "spread: the change cannot be told from noise",
        }
    outcome = step_test.gate_outcome(test, pct)
    figures = (
        f"step time {format_value(step['a'], 'ms')} -> {format_value(step['b'], 'ms')}: {_test_text(test)}"
    )
    if outcome == "regressed":
        reason = f"{figures}; slower beyond the noise and above the {pct:g}% threshold"
    elif outcome == "inconclusive" and test["delta_pct"] > pct:
        needed = test["steps_to_decide"]
        reason = f"{figures}; above the {pct:g}% threshold but within what the steps' noise can make" + (
            f": about {needed} steps per run would tell a change this size" if needed else ""
        )
    elif outcome == "inconclusive":
        resolution = step_test.resolution_pct(pct)
        needed = _steps_for(diff, resolution)
        reason = (
            f"{figures}; at or under the {pct:g}% threshold, but the interval is wider than "
            f"+-{resolution:g}%: a regression that size could hide in the steps' noise"
            + (f"; about {needed} steps per run would resolve it" if needed else "")
        )
    else:
        reason = f"{figures}; at or under the {pct:g}% threshold"
    return {"outcome": outcome, "reason": reason}


def _steps_for(diff: dict, half_width_pct: float) -> int | None:
    """Steps per run for the interval to shrink to +-half_width_pct, from the spreads the test used."""
    test = diff["step_time_ms"]["test"]
    low, high = test["ci_pct"]
    if high <= low:
        return None
    # The half-width falls as 1/sqrt(steps): scale the larger run's count.
    return math.ceil(max(test["steps"]) * ((high - low) / 2 / half_width_pct) ** 2)


def _delta(change: dict, unit: str) -> str:
    text = f"{format_value(change['a'], unit)} -> {format_value(change['b'], unit)}"
    if change.get("delta_pp") is not None:
        text += f" ({format_pp(change['delta_pp'])})"
    elif change.get("delta_pct") is not None:
        text += f" ({format_change_pct(change['delta_pct'])})"
    return text


def _step_line(diff: dict) -> str:
    step, sources = diff["step_time_ms"], diff["step_time_source"]
    basis = "plain-pass steps" if step["basis"] == "plain" else "profiled steps"
    if step["verdict"] == "unknown":
        verdict = "not comparable: a step time or its spread is missing"
    elif step["test"] is None:
        verdict = "identical"
    else:
        verdict = f"{step['verdict']} ({_test_text(step['test'], with_change=False)})"
    where = (
        "plain pass, no collector"
        if step["basis"] == "plain"
        else f"{source_label(str(sources['a'] or 'unknown'))} / "
        f"{source_label(str(sources['b'] or 'unknown'))}"
    )
    line = f"Step time ({basis}): {_delta(step, 'ms')}  {verdict}  [{where}]"
    if step.get("plain"):
        line += (
            f"; plain pass {_delta(step['plain'], 'ms')} (no per-step samples stored: an older "
            "document, so the test uses the profiled steps)"
        )
    if step.get("profiled") and step["profiled"]["delta"] is not None:
        line += f"; profiled steps {_delta(step['profiled'], 'ms')}, which the collector slows"
    return line


def _kernel_figure(value: object, presence: str, run: str, cutoff_ms: float | None) -> str:
    if value is not None:
        return format_value(value, "ms")
    under = f" (under {format_value(cutoff_ms, 'ms')})" if cutoff_ms is not None else ""
    return {
        "absent": "did not run",
        "ran": f"ran, below {run}'s stored top {TOP_KERNELS_STORED}{under}",
        "unknown": f"not stored in {run}{under}",
    }.get(presence, "n/a")


def _kernel_line(row: dict, label: str, cutoffs: dict[str, float | None]) -> str:
    text = (
        f"{_kernel_figure(row['a'], row['in_a'], 'A', cutoffs['a'])} -> "
        f"{_kernel_figure(row['b'], row['in_b'], 'B', cutoffs['b'])}"
    )
    if row.get("delta_pct") is not None:
        text += f" ({format_change_pct(row['delta_pct'])})"
    elif row["a"] is None and row["in_a"] == "absent":
        text += " (new)"
    elif row["b"] is None and row["in_b"] == "absent":
        text += " (gone)"
    return f"  {label}: {text}"


def _bound(bound: object) -> str:
    return f"{bound}-bound" if bound else "not placed"


def compare_lines(diff: dict) -> list[tuple[str, str]]:
    """The comparison as (kind, text) lines: kind is "warning", "item" (step time, utilization, roofline),
    "finding", "heading", "kernel" or "note". The text and HTML renderers lay these out."""
    diff = escape_strings(diff)
    lines = [
        ("warning", "WARNING: " + d + ": the comparison does not say whether a change helped")
        for d in diff["workload"]["differences"]
    ]
    lines.append(("item", _step_line(diff)))
    roof_a, roof_b = diff["roofline"]["a"], diff["roofline"]["b"]
    utilization = diff["gpu_util_pct"]
    if utilization["a"] is None and utilization["b"] is None and not roof_a["bound"] and not roof_b["bound"]:
        # Two CPU-only runs (or two without a device timeline): no GPU figure to put side by side.
        lines.append(("item", "GPU utilization and roofline: not measured in either run (no GPU timeline)"))
    else:
        ai_a, ai_b = (format_value(r["arithmetic_intensity"], "FLOP/B") for r in (roof_a, roof_b))
        attainable = _delta(diff["roofline"]["achieved_pct_of_attainable"], "%")
        roofline = f"Roofline: {_bound(roof_a['bound'])}, AI {ai_a} -> {_bound(roof_b['bound'])}, AI {ai_b}"
        lines.append(("item", f"GPU utilization: {_delta(utilization, '%')}"))
        lines.append(("item", f"{roofline}; of attainable {attainable}"))
    findings = diff["findings"]
    for label, key in (("Resolved", "resolved"), ("New", "new")):
        lines += [("finding", f"{label}: [{f['severity']}] {f['title']} ({f['id']})") for f in findings[key]]
    for f in findings["unchanged"]:
        lines.append(
            (
                "finding",
                (
                    f"Still present: [{f['severity_a']} -> {f['severity_b']}] {f['title']} ({f['id']}), "
                    f"time lost {_delta(f['time_lost_ms'], 'ms')} [estimated]"
                ),
            )
        )
    for side, other in (("b", "B"), ("a", "A")):
        for f in findings[f"not_checked_in_{side}"]:
            lines.append(
                (
                    "finding",
                    (
                        f"Not checked in {other}: [{f['severity']}] {f['title']} ({f['id']}): run "
                        f"{other} lacks {', '.join(f['missing'])}"
                    ),
                )
            )
    if diff["top_kernels"]:
        lines.append(("heading", "Top kernels (time per step):"))
        # A kernel a run did not store took less time there than the last one it stored.
        cutoffs = {
            side: min(
                (
                    row[side]
                    for row in diff["top_kernels"]
                    if row[f"in_{side}"] == "stored" and row[side] is not None
                ),
                default=None,
            )
            for side in ("a", "b")
        }
        labels = distinct_labels([str(row["name"]) for row in diff["top_kernels"]], KERNEL_LABEL_WIDTH)
        lines += [
            ("kernel", _kernel_line(row, label, cutoffs))
            for row, label in zip(diff["top_kernels"], labels, strict=True)
        ]
    lines += [("note", f"note: {note}") for note in diff["notes"]]
    return lines


def render_compare(diff: dict) -> str:
    """Plain-text comparison; every name from the programs is escaped and shortened like the terminal
    report."""
    return "\n".join(text for _kind, text in compare_lines(diff)) + "\n"
