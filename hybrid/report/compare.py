"""Two results of the same workload side by side (before/after a change, or in CI against a baseline):
step time, GPU utilization, roofline position, top kernels, and findings matched by rule id."""

from __future__ import annotations

from hybrid.report import format_value, short_name, source_label

TOP_KERNELS_COMPARED = 10  # the union of each run's top kernels, by time per step


def _change(before: float | None, after: float | None) -> dict:
    change = {"a": before, "b": after, "delta": None, "delta_pct": None}
    if before is not None and after is not None:
        change["delta"] = after - before
        if before:
            change["delta_pct"] = (after - before) / before * 100
    return change


def _findings(a: dict, b: dict) -> dict:
    def by_id(results: dict) -> dict:
        return {f["id"]: f for f in (results.get("diagnosis") or {}).get("bottlenecks") or []}
    before, after = by_id(a), by_id(b)
    return {
        "resolved": [{"id": i, "title": before[i]["title"], "severity": before[i]["severity"]}
                     for i in before if i not in after],
        "new": [{"id": i, "title": after[i]["title"], "severity": after[i]["severity"]} for i in after if i not in before],
        "unchanged": [{"id": i, "title": after[i]["title"], "severity_a": before[i]["severity"],
                       "severity_b": after[i]["severity"],
                       "time_lost_ms": _change(before[i].get("time_lost_ms"), after[i].get("time_lost_ms"))}
                      for i in before if i in after],
    }


def _kernels(a: dict, b: dict) -> list[dict]:
    def totals(results: dict) -> dict:
        return {k["name"]: k.get("total_ms_per_step") for k in (results.get("top_kernels") or [])[:TOP_KERNELS_COMPARED]}
    before, after = totals(a), totals(b)
    names = list(dict.fromkeys([*before, *after]))
    rows = [{"name": name, **_change(before.get(name), after.get(name))} for name in names]
    return sorted(rows, key=lambda row: -max(row["a"] or 0.0, row["b"] or 0.0))


def _roofline(results: dict) -> dict:
    roof = results.get("roofline") or {}
    return {key: roof.get(key) for key in ("bound", "arithmetic_intensity", "achieved_pct_of_attainable", "source")}


def compare_results(a: dict, b: dict) -> dict:
    """What changed from run `a` to run `b`. Step times measured by different collectors (an nsys pass
    against a torch-only run) are not comparable to the last percent; `notes` says so."""
    timing_a, timing_b = a.get("timing") or {}, b.get("timing") or {}
    notes = []
    if a.get("mode") != b.get("mode"):
        notes.append(f"modes differ ({a.get('mode')} vs {b.get('mode')}): the step times come from different "
                     "collectors and their overheads differ")
    if (a.get("device") or {}).get("name") != (b.get("device") or {}).get("name"):
        notes.append("devices differ: compare the roofline positions rather than absolute times")
    return {
        "mode": {"a": a.get("mode"), "b": b.get("mode")},
        "step_time_ms": _change(timing_a.get("step_time_ms"), timing_b.get("step_time_ms")),
        "step_time_source": {"a": timing_a.get("source"), "b": timing_b.get("source")},
        "gpu_util_pct": _change(timing_a.get("gpu_util_pct"), timing_b.get("gpu_util_pct")),
        "roofline": {"a": _roofline(a), "b": _roofline(b)},
        "top_kernels": _kernels(a, b),
        "findings": _findings(a, b),
        "notes": notes,
    }


def regressed(diff: dict, pct: float) -> bool:
    """True when run b's step time is more than `pct` percent slower than run a's (for CI gating)."""
    change = diff["step_time_ms"]["delta_pct"]
    return change is not None and change > pct


def _delta(change: dict, unit: str) -> str:
    text = f"{format_value(change['a'], unit)} -> {format_value(change['b'], unit)}"
    if change["delta_pct"] is not None:
        text += f" ({change['delta_pct']:+.1f}%)"
    return text


def render_compare(diff: dict) -> str:
    """Plain-text comparison (program names are printed as data, shortened like the terminal report)."""
    sources = diff["step_time_source"]
    lines = [(f"Step time: {_delta(diff['step_time_ms'], 'ms')}  "
             f"[{source_label(str(sources['a'] or 'unknown'))} / {source_label(str(sources['b'] or 'unknown'))}]"),
             f"GPU utilization: {_delta(diff['gpu_util_pct'], '%')}"]
    roof_a, roof_b = diff["roofline"]["a"], diff["roofline"]["b"]
    lines.append(f"Roofline: {roof_a['bound']}-bound, AI {format_value(roof_a['arithmetic_intensity'], 'FLOP/B')}, "
                 f"{format_value(roof_a['achieved_pct_of_attainable'], '%')} of attainable -> {roof_b['bound']}-bound, "
                 f"AI {format_value(roof_b['arithmetic_intensity'], 'FLOP/B')}, "
                 f"{format_value(roof_b['achieved_pct_of_attainable'], '%')} of attainable")
    findings = diff["findings"]
    for label, key in (("Resolved", "resolved"), ("New", "new")):
        for finding in findings[key]:
            lines.append(f"{label}: [{finding['severity']}] {finding['title']} ({finding['id']})")
    for finding in findings["unchanged"]:
        lines.append(f"Still present: [{finding['severity_a']} -> {finding['severity_b']}] {finding['title']} "
                     f"({finding['id']}), time lost {_delta(finding['time_lost_ms'], 'ms')} [estimated]")
    if diff["top_kernels"]:
        lines.append("Top kernels (time per step):")
        lines += [f"  {short_name(row['name'])}: {_delta(row, 'ms')}" for row in diff["top_kernels"]]
    lines += [f"note: {note}" for note in diff["notes"]]
    return "\n".join(lines) + "\n"
