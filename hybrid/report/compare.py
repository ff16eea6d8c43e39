"""Two results of the same workload side by side (before/after a change, or in CI against a baseline):
step time, GPU utilization, roofline position, top kernels, and findings matched by rule id.

The comparison says no more than the two documents support:
- a step-time change within the steps' spread (the two runs' step standard deviations combined) is
  "unchanged", whatever its percentage;
- percentages (GPU utilization, share of attainable) change in percentage points;
- a finding of run A that run B does not report is "resolved" only when B measured what the finding
  rests on; otherwise it is "not checked in B" (and likewise "new" needs A to have measured it);
- runs of different workloads, batch sizes or devices are said to differ at the top, and a CI gate
  (`gate`) fails on them, as on a document without a step time, with the reason."""

from __future__ import annotations

import math

from hybrid.report import findings_by_impact, format_value, short_name, source_label
from hybrid.report.safe_text import escape_strings
from hybrid.report.units import format_change_pct, format_pp, is_number

TOP_KERNELS_COMPARED = 10  # the union of each run's top kernels, by time per step


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


def step_change(a: dict, b: dict) -> dict:
    """Step time of each run, the change, and whether it exceeds the noise: the spread of one step's time
    in each run (standard deviation), combined as for a difference, sqrt(std_a^2 + std_b^2)."""
    timing_a, timing_b = _section(a, "timing"), _section(b, "timing")
    change = _change(timing_a.get("step_time_ms"), timing_b.get("step_time_ms"))
    spreads = [_number(timing_a.get("step_time_std_ms")), _number(timing_b.get("step_time_std_ms"))]
    noise = math.hypot(*spreads) if all(s is not None for s in spreads) else None
    change["noise_ms"] = noise
    if change["delta"] is None:
        verdict = "unknown"
    elif change["delta"] == 0 or (noise is not None and abs(change["delta"]) <= noise):
        verdict = "unchanged"
    else:
        verdict = "slower" if change["delta"] > 0 else "faster"
    change["verdict"] = verdict
    return change


def _identity(results: dict) -> dict:
    workload, device = _section(results, "workload"), _section(results, "device")
    command = workload.get("command")
    words = command.split() if isinstance(command, str) else [str(w) for w in command or []]
    # The program: a script's path, or `-m module [name]` for a module such as hybrid.models resnet50.
    program = words[:3] if words[:1] == ["-m"] else words[:1]
    return {"model": workload.get("model"), "program": " ".join(program) or None,
            "command": " ".join(words) or None, "batch_size": workload.get("batch_size"),
            "device": device.get("name"), "mode": results.get("mode")}


def workload_differences(a: dict, b: dict) -> tuple[list[str], list[str]]:
    """(differences that make the step times incomparable, differences worth a note)."""
    id_a, id_b = _identity(a), _identity(b)
    serious, minor = [], []
    models_known = id_a["model"] is not None and id_b["model"] is not None
    for key, what in (("model", "models"), ("program", "programs"), ("batch_size", "batch sizes"),
                      ("device", "devices")):
        if key == "program" and models_known:
            continue  # the built-in workloads share one program; their model names them
        if id_a[key] is not None and id_b[key] is not None and id_a[key] != id_b[key]:
            serious.append(f"{what} differ ({id_a[key]} vs {id_b[key]})")
    if not serious and id_a["command"] != id_b["command"] and None not in (id_a["command"], id_b["command"]):
        minor.append(f"commands differ: {id_a['command']} vs {id_b['command']}")
    if id_a["mode"] != id_b["mode"]:
        minor.append(f"modes differ ({id_a['mode']} vs {id_b['mode']}): the step times come from different "
                     "collectors and their overheads differ")
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
            if (metric or {}).get("value") == item.get("value") and metric.get("unit") == item.get("unit") \
                    and metric.get("source") == item.get("source") and item.get("value") not in (None, "", 0):
                names.append(name)
                break
    return names


def _lacks(results: dict, metric_names: list[str]) -> list[str]:
    metrics = _section(results, "metrics")
    return [n for n in metric_names if not isinstance(metrics.get(n), dict) or metrics[n].get("value") in (None, "")]


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
    out: dict[str, list] = {"resolved": [], "new": [], "unchanged": [], "not_checked_in_b": [],
                            "not_checked_in_a": []}
    for fid, finding in before.items():
        if fid in after:
            out["unchanged"].append({"id": fid, "title": after[fid].get("title"), "severity_a": finding.get("severity"),
                                     "severity_b": after[fid].get("severity"),
                                     "time_lost_ms": _change(finding.get("time_lost_ms"),
                                                             after[fid].get("time_lost_ms"))})
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
        out["not_checked_in_a" if missing else "new"].append({**_summary(finding), **({"missing": missing}
                                                                                      if missing else {})})
    return out


def _kernels(a: dict, b: dict) -> list[dict]:
    def totals(results: dict) -> dict:
        kernels = results.get("top_kernels") if isinstance(results.get("top_kernels"), list) else []
        return {k["name"]: k.get("total_ms_per_step") for k in kernels[:TOP_KERNELS_COMPARED]
                if isinstance(k, dict) and isinstance(k.get("name"), str)}
    before, after = totals(a), totals(b)
    names = list(dict.fromkeys([*before, *after]))
    rows = [{"name": name, **_change(before.get(name), after.get(name))} for name in names]
    return sorted(rows, key=lambda row: -max(row["a"] or 0.0, row["b"] or 0.0))


def _roofline(results: dict) -> dict:
    roof = _section(results, "roofline")
    return {key: roof.get(key) for key in ("bound", "arithmetic_intensity", "achieved_pct_of_attainable", "source")}


def compare_results(a: dict, b: dict) -> dict:
    """What changed from run `a` to run `b` (both results documents)."""
    serious, minor = workload_differences(a, b)
    timing_a, timing_b = _section(a, "timing"), _section(b, "timing")
    roof_a, roof_b = _roofline(a), _roofline(b)
    return {
        "mode": {"a": a.get("mode"), "b": b.get("mode")},
        "workload": {"a": _identity(a), "b": _identity(b), "same": not serious, "differences": serious},
        "step_time_ms": step_change(a, b),
        "step_time_source": {"a": timing_a.get("source"), "b": timing_b.get("source")},
        "gpu_util_pct": _change(timing_a.get("gpu_util_pct"), timing_b.get("gpu_util_pct"), percent=True),
        "roofline": {"a": roof_a, "b": roof_b,
                     "achieved_pct_of_attainable": _change(roof_a["achieved_pct_of_attainable"],
                                                           roof_b["achieved_pct_of_attainable"], percent=True)},
        "top_kernels": _kernels(a, b),
        "findings": _findings(a, b),
        "notes": minor,
    }


def gate(diff: dict, pct: float) -> str | None:
    """The CI gate on run b against run a: None when b passes, else the reason it fails. b fails when its
    step time is more than `pct` percent above a's and beyond the noise, and also whenever the gate cannot
    be decided: a run without a step time, or runs of different workloads."""
    if not math.isfinite(pct):
        raise ValueError(f"the regression threshold must be a finite number, not {pct}")
    step = diff["step_time_ms"]
    if diff["workload"]["differences"]:
        return "the runs are of different workloads: " + "; ".join(diff["workload"]["differences"])
    for side, name in (("b", "candidate"), ("a", "baseline")):
        if step[side] is None:
            return f"the {name} has no step time (no measured steps, or not a results.json document)"
    if step["delta_pct"] is None:
        return "the baseline's step time is zero: no relative change can be computed"
    if step["delta_pct"] > pct and step["verdict"] == "slower":
        return (f"step time {format_change_pct(step['delta_pct'])} ({format_value(step['a'], 'ms')} -> "
                f"{format_value(step['b'], 'ms')}), above the {pct:g}% threshold and beyond the steps' spread")
    return None


def _delta(change: dict, unit: str) -> str:
    text = f"{format_value(change['a'], unit)} -> {format_value(change['b'], unit)}"
    if change.get("delta_pp") is not None:
        text += f" ({format_pp(change['delta_pp'])})"
    elif change.get("delta_pct") is not None:
        text += f" ({format_change_pct(change['delta_pct'])})"
    return text


def _step_line(diff: dict) -> str:
    step, sources = diff["step_time_ms"], diff["step_time_source"]
    verdict = {"unchanged": "unchanged: within the steps' spread", "slower": "slower", "faster": "faster",
               "unknown": "not comparable: a step time is missing"}[step["verdict"]]
    spread = f", spread ±{format_value(step['noise_ms'], 'ms')}" if step.get("noise_ms") is not None else \
        ", no step spread recorded"
    return (f"Step time: {_delta(step, 'ms')}  {verdict}{spread if step['verdict'] != 'unknown' else ''}  "
            f"[{source_label(str(sources['a'] or 'unknown'))} / {source_label(str(sources['b'] or 'unknown'))}]")


def compare_lines(diff: dict) -> list[tuple[str, str]]:
    """The comparison as (kind, text) lines: kind is "warning", "item" (step time, utilization, roofline),
    "finding", "heading", "kernel" or "note". The text and HTML renderers lay these out."""
    diff = escape_strings(diff)
    lines = [("warning", "WARNING: " + d + ": the comparison does not say whether a change helped")
             for d in diff["workload"]["differences"]]
    lines += [("item", _step_line(diff)), ("item", f"GPU utilization: {_delta(diff['gpu_util_pct'], '%')}")]
    roof_a, roof_b = diff["roofline"]["a"], diff["roofline"]["b"]
    lines.append(("item", (f"Roofline: {roof_a['bound'] or 'not placed'}-bound, AI "
                  f"{format_value(roof_a['arithmetic_intensity'], 'FLOP/B')} -> {roof_b['bound'] or 'not placed'}"
                  f"-bound, AI {format_value(roof_b['arithmetic_intensity'], 'FLOP/B')}; of attainable "
                  f"{_delta(diff['roofline']['achieved_pct_of_attainable'], '%')}")))
    findings = diff["findings"]
    for label, key in (("Resolved", "resolved"), ("New", "new")):
        lines += [("finding", f"{label}: [{f['severity']}] {f['title']} ({f['id']})") for f in findings[key]]
    for f in findings["unchanged"]:
        lines.append(("finding", (f"Still present: [{f['severity_a']} -> {f['severity_b']}] {f['title']} ({f['id']}), "
                      f"time lost {_delta(f['time_lost_ms'], 'ms')} [estimated]")))
    for side, other in (("b", "B"), ("a", "A")):
        for f in findings[f"not_checked_in_{side}"]:
            lines.append(("finding", (f"Not checked in {other}: [{f['severity']}] {f['title']} ({f['id']}): run "
                          f"{other} lacks {', '.join(f['missing'])}")))
    if diff["top_kernels"]:
        lines.append(("heading", "Top kernels (time per step):"))
        lines += [("kernel", f"  {short_name(str(row['name']))}: {_delta(row, 'ms')}") for row in diff["top_kernels"]]
    lines += [("note", f"note: {note}") for note in diff["notes"]]
    return lines


def render_compare(diff: dict) -> str:
    """Plain-text comparison; every name from the programs is escaped and shortened like the terminal report."""
    return "\n".join(text for _kind, text in compare_lines(diff)) + "\n"
