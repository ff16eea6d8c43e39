"""The public results.json contract (DESIGN.md). Renderers, `profile_model` and users' CI read this
shape; additive changes keep the major version, anything else bumps it."""

from __future__ import annotations

SCHEMA_VERSION = "1.0"

MODES = ("hybrid", "nsys", "torch-only", "cpu-only")

# key -> required sub-keys. Values not listed are free-form but documented in README.
REQUIRED = {
    "schema_version": None,
    "mode": None,  # one of MODES
    "tools": None,  # {"hybrid": "0.1.0", "torch": "2.11.0", "nsys": "2025.3.2" | None, "ncu": ... | None}
    "workload": ("command", "steps_measured", "warmup_steps"),  # + batch_size, step_source, model
    "device": ("name", "sm_count", "peaks", "source"),  # peaks: dram_bytes_per_s, flops_per_s {fp32,...}
    "timing": ("step_time_ms", "gpu_busy_ms", "gpu_util_pct"),  # + step_time_std_ms, idle breakdown
    "metrics": None,  # {name: {value, unit, source}}
    "roofline": ("bound", "arithmetic_intensity", "ridge_point", "achieved_pct_of_attainable", "source",
                 "kernels"),
    "diagnosis": ("primary_bottleneck", "bottlenecks"),
    "passes": None,  # [{name, status, wall_s, step_time_ms, artifacts, message}]
    "warnings": None,  # [str]
    "limitations": None,  # [str]: what could not be measured in this mode, and why
}

FINDING_KEYS = ("id", "title", "category", "severity", "evidence", "explanation", "suggestions",
                "time_lost_ms", "time_lost_pct")
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


# Keys a reader of results.json (compare, CI scripts) walks into, with the JSON type each must have
# when present: a damaged document is refused by name instead of failing deep inside the reader.
SHAPES = {
    "timing": dict, "roofline": dict, "diagnosis": dict, "device": dict, "workload": dict, "top_kernels": list,
}
NUMBERS_IN = {"timing": ("step_time_ms", "gpu_util_pct"),
              "roofline": ("arithmetic_intensity", "achieved_pct_of_attainable")}


def _is_number(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def shape_errors(results: dict) -> list[str]:
    """Where `results` has a value of the wrong JSON type on a path readers follow; empty when none.
    Missing keys are not errors here (missing_keys checks the full contract)."""
    errors: list[str] = []
    for key, kind in SHAPES.items():
        if results.get(key) is not None and not isinstance(results[key], kind):
            errors.append(f"{key} is a {type(results[key]).__name__}, not {'an object' if kind is dict else 'a list'}")
    for key, names in NUMBERS_IN.items():
        block = results.get(key)
        for name in names if isinstance(block, dict) else ():
            if not _is_number(block.get(name)):
                errors.append(f"{key}.{name} is not a number: {block.get(name)!r:.40}")
    for name in ("bound", "source"):
        roof = results.get("roofline")
        if isinstance(roof, dict) and not isinstance(roof.get(name), (str, type(None))):
            errors.append(f"roofline.{name} is not text")
    for i, kernel in enumerate(results.get("top_kernels") or [] if isinstance(results.get("top_kernels"), list) else []):
        if not isinstance(kernel, dict) or not isinstance(kernel.get("name"), str) \
                or not _is_number(kernel.get("total_ms_per_step")):
            errors.append(f"top_kernels[{i}] is not a kernel entry (name, total_ms_per_step)")
    diagnosis = results.get("diagnosis")
    findings = diagnosis.get("bottlenecks") if isinstance(diagnosis, dict) else None
    if findings is not None and not isinstance(findings, list):
        errors.append("diagnosis.bottlenecks is not a list")
    for i, finding in enumerate(findings if isinstance(findings, list) else []):
        if not isinstance(finding, dict) or not all(isinstance(finding.get(k), str) for k in ("id", "title", "severity")) \
                or not _is_number(finding.get("time_lost_ms")):
            errors.append(f"diagnosis.bottlenecks[{i}] is not a finding (id, title, severity, time_lost_ms)")
    return errors
