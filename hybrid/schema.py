"""The public results.json contract (docs/DESIGN.md). Renderers, `profile_model` and users' CI read this
shape; additive changes keep the major version, anything else bumps it."""

from __future__ import annotations

from hybrid.jsontypes import NUMBER, typed_fields

SCHEMA_VERSION = "1.1"  # 1.1: the fields added in docs/DESIGN.md "Schema 1.1"

MODES = ("hybrid", "nsys", "torch-only", "cpu-only")

# How the warnings (`warnings`) on the ncu pass's plan begin, the reason after them: skipped, or run on the
# kernels it names. The collector writes them, the renderers know them by these prefixes (the terminal's
# Passes line gives the ncu pass's outcome and its default view folds them).
NCU_SKIPPED_WARNING = "ncu pass skipped:"
NCU_PLANNED_WARNING = "ncu pass on "

# key -> required sub-keys. Values not listed are free-form but documented in README.
REQUIRED = {
    "schema_version": None,
    "mode": None,  # one of MODES
    "tools": None,  # {"hybrid": "0.1.0", "torch": "2.11.0", "nsys": "2025.3.2" | None, "ncu": ... | None}
    "workload": ("command", "steps_measured", "warmup_steps"),  # + batch_size, step_source, model
    "device": ("name", "sm_count", "peaks", "source"),  # peaks: dram_bytes_per_s, flops_per_s {fp32,...}
    "timing": ("step_time_ms", "gpu_busy_ms", "gpu_util_pct"),  # + step_time_std_ms, idle breakdown
    "metrics": None,  # {name: {value, unit, source}}
    "roofline": (
        "bound",
        "arithmetic_intensity",
        "ridge_point",
        "achieved_pct_of_attainable",
        "source",
        "kernels",
    ),
    "diagnosis": ("primary_bottleneck", "bottlenecks"),
    # [{name, status, wall_s, step_time_ms, overhead_pct, overhead_ci_pct, artifacts, message}]
    "passes": None,
    "warnings": None,  # [str]
    "limitations": None,  # [str]: what could not be measured in this mode, and why
}

FINDING_KEYS = (
    "id",
    "title",
    "category",
    "severity",
    "evidence",
    "explanation",
    "suggestions",
    "time_lost_ms",
    "time_lost_pct",
)
EVIDENCE_KEYS = ("label", "value", "unit", "source")


def missing_keys(results: dict) -> list[str]:
    """Paths of required keys absent from `results`; empty when it satisfies the contract."""
    missing: list[str] = []
    for key, subkeys in REQUIRED.items():
        if key not in results:
            missing.append(key)
            continue
        for sub in subkeys or ():
            if not isinstance(results[key], dict) or sub not in results[key]:
                missing.append(f"{key}.{sub}")
    for i, finding in enumerate(results.get("diagnosis", {}).get("bottlenecks", [])):
        missing += [f"diagnosis.bottlenecks[{i}].{k}" for k in FINDING_KEYS if k not in finding]
        for j, ev in enumerate(finding.get("evidence", [])):
            missing += [f"diagnosis.bottlenecks[{i}].evidence[{j}].{k}" for k in EVIDENCE_KEYS if k not in ev]
    return missing


# The finding fields renderers and `compare` compute with, and the JSON types each may hold.
FINDING_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "title": (str,),
    "category": (str,),
    "severity": (str,),
    "explanation": (str,),
    "evidence": (list,),
    "suggestions": (list,),
    "advice": (list,),
    "callsites": (list,),
    "callsite_reason": (str,),
    "alternative_to": (list,),
    "claimed": (dict,),
    "time_lost_ms": NUMBER,
    "time_lost_pct": NUMBER,
    "time_lost_baseline_ms": NUMBER,
    "time_lost_baseline_pct": NUMBER,
    "weighed_lost_ms": NUMBER,
    # "realized" where weighed_lost_ms is the saving --verify measured, "predicted" otherwise
    "weighed_on": (str,),
    "not_measured": (bool,),
    "time_lost_method": (str,),
    # Why a "model" figure is not a replay (set whenever time_lost_method is "model").
    "replay_reason": (str,),
    "verify": (dict,),  # hybrid run --verify: the fix's realized saving (docs/DESIGN.md)
}


def typed_findings(results: dict, where: str) -> list[str]:
    """Clean the findings of a results document read from a file hybrid did not necessarily write: a
    finding that is not an object or has no text id is left out, a field of another type is dropped.
    Returns what was left out, one line each."""
    problems: list[str] = []
    diagnosis = results.get("diagnosis")
    if not isinstance(diagnosis, dict):
        return problems
    if isinstance(diagnosis.get("bottlenecks"), list):
        kept = []
        for i, finding in enumerate(diagnosis["bottlenecks"]):
            clean = _typed_finding(finding, f"{where} bottlenecks[{i}]", problems)
            if clean.get("id"):
                kept.append(clean)
            else:
                problems.append(f"{where}: bottlenecks[{i}] has no id, left out")
        diagnosis["bottlenecks"] = kept
    primary = diagnosis.get("primary_bottleneck")
    if primary is not None:
        clean = _typed_finding(primary, f"{where} primary_bottleneck", problems)
        diagnosis["primary_bottleneck"] = clean if clean.get("id") else None
    return problems


# List fields of a finding and the type of their items.
FINDING_ITEMS: dict[str, type] = {
    "evidence": dict,
    "advice": dict,
    "callsites": dict,
    "suggestions": str,
    "alternative_to": str,
}


def _typed_finding(finding: object, where: str, problems: list[str]) -> dict:
    if not isinstance(finding, dict):
        return {}
    clean = typed_fields(finding, FINDING_TYPES, where, problems)
    for key, item_type in FINDING_ITEMS.items():
        items = clean.get(key)
        if isinstance(items, list) and not all(isinstance(item, item_type) for item in items):
            clean[key] = [item for item in items if isinstance(item, item_type)]
            problems.append(f"{where}: `{key}` entries that are not {item_type.__name__} left out")
    return clean
