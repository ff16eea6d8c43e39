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

