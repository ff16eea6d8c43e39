"""Profile -> the analysis half of results.json: device and peaks, timing, metrics, roofline,
per-layer and top-kernel tables and limitations, and the rules' findings as a Diagnosis for the stages
that follow (hybrid.pipeline.STAGES). The pipeline adds schema_version, mode, tools, workload, passes
and warnings around it."""

from __future__ import annotations

from typing import NamedTuple

from hybrid.analysis.diagnosis import Analyzed, Diagnosis
from hybrid.analysis.jitter import slow_step_metrics
from hybrid.analysis.metrics import compute_metrics
from hybrid.analysis.roofline import roofline
from hybrid.analysis.step_timeline import step_timeline
from hybrid.analysis.steps import frame_source, steady_steps
from hybrid.analysis.tables import layer_table, top_kernels
from hybrid.hardware import Peaks, peaks_for
from hybrid.ledger import build_ledger
from hybrid.ledger.causes import IDLE_ORDER
from hybrid.numbers import NS_PER_MS
from hybrid.profile import Profile
from hybrid.provenance import Metric
from hybrid.rules import engine
from hybrid.rules.advice import config_of, observed_config
from hybrid.rules.base import Context, Finding
from hybrid.rules.registry import GPU_CATEGORIES, RULE_BY_ID, RULES


def _has_gpu(profile: Profile) -> bool:
    if profile.extras.get("cuda_available") is False:
        return False
    return bool(profile.device.name) or not profile.kernels.empty


def _rule_peaks(peaks: Peaks) -> dict:
    """Plain numbers for rules (their sources are in the device block)."""
    return {
        "dram_bytes_per_s": peaks.dram,
        "flops_per_s": {p: peaks.flops(p) for p in peaks.flops_per_s},
        "pinned_copy_bytes_per_s": peaks.pinned_copy_bytes_per_s,
        "sm_count": None if peaks.sm_count is None else peaks.sm_count.value,
    }


def run_rules(ctx: Context, gpu: bool) -> list[Finding]:
    return engine.run(
        [rule for rule in RULES if gpu or rule.host_side or rule.category not in GPU_CATEGORIES], ctx
    )


# Families whose findings are about a GPU: its kernels, copies and idle time, or work left on the host that
# the GPU could do (CPU_RESIDENCY). With no GPU in the run none of them can hold.
NEEDS_GPU = (*GPU_CATEGORIES, "CPU_RESIDENCY", "COMMUNICATION")
# The peak only the counters' L2 bytes are read against (hybrid.hardware.Peaks).
L2_PEAK = "l2_bytes_per_s"


def applicable(findings: list[Finding], gpu: bool) -> list[Finding]:
    """The findings that can hold for this run: on a run without a GPU, none about a GPU (the host-side
    rules' findings are about the host)."""
    host_side = {rule.id for rule in RULE_BY_ID.values() if rule.host_side}
    return findings if gpu else [f for f in findings if f.category not in NEEDS_GPU or f.id in host_side]


def _timing(metrics: dict[str, Metric]) -> dict:
    def v(name):
        m = metrics.get(name)
        return None if m is None else m.value

    return {
        "step_time_ms": v("step_time_ms"),
        "step_time_std_ms": v("step_time_std_ms"),
        "step_time_median_ms": v("step_time_median_ms"),
        "step_time_cv_pct": v("step_time_cv_pct"),
        "slowest_step": v("slowest_step"),
        "steps_excluded": v("steps_excluded"),
        "gpu_busy_ms": v("gpu_busy_ms"),
        "gpu_idle_ms": v("gpu_idle_ms"),
        "gpu_util_pct": v("gpu_util_pct"),
        "idle_breakdown_ms": {cause: v(f"idle_{cause}_ms") for cause in IDLE_ORDER},
        "source": metrics["step_time_ms"].source if "step_time_ms" in metrics else None,
    }


def _step_samples_ms(profile: Profile) -> list[float]:
    """Each steady step's duration in order (the steps step_time_ms averages): `hybrid compare` tests the
    difference of two runs' means on them (Welch's t needs the spread and the count, not just the mean)."""
    steps = steady_steps(profile)
    return [] if steps.empty else [round(float(ns) / NS_PER_MS, 6) for ns in steps["dur_ns"]]


def _limitations(
    profile: Profile, peaks: Peaks, metrics: dict[str, Metric], roof: dict, gpu: bool
) -> list[str]:
    out = []
    if not gpu:
        out.append(
            "No CUDA GPU was used: GPU analysis (kernels, copies, syncs, roofline) was not possible; "
            "only host-side timing and host-side findings (the DataLoader) are reported."
        )
    if profile.steps.empty:
        out.append("No measured steps were found: mark steps with hybrid.mark_step() or pass --step-range.")
    if gpu and profile.counters.empty:
        out.append(
            "No hardware counters (ncu): DRAM bytes, cache hit rates, occupancy and tensor-pipe use are "
            "not measured; FLOPs and bytes are estimated from operator shapes where the torch pass ran."
        )
    # Only ncu's L2 bytes are read against the L2 peak (the roofline's L2 points, the counters' plausibility
    # check): without counters its absence omits nothing, and saying so on every H100 run was noise.
    missing = [k for k in peaks.unknown if k != L2_PEAK or not profile.counters.empty]
    if gpu and missing:
        out.append(
            f"Unknown peaks for {profile.device.name!r}: {', '.join(missing)}; "
            "percent-of-peak figures that need them are omitted."
        )
    if roof.get("reason"):
        out.append(f"Roofline not placed: {roof['reason']}.")
    excluded = metrics.get("steps_excluded")
    if excluded is not None and excluded.value:
        out.append(
            f"{excluded.value} outlier step(s) (over 3x the median, slowest: "
            f"{metrics['slowest_step'].value}) are excluded from per-step averages."
        )
    if gpu and profile.ops.empty:
        out.append(
            "No torch operator data: CPU-residency checks (CPU-heavy ops, tensors created on the CPU), "
            "matmul shapes and FLOP estimates need the torch pass."
        )
    return out


class Analysis(NamedTuple):
    document: dict  # the analysis keys of results.json, the diagnosis as the rules left it
    diagnosis: Diagnosis
    analyzed: Analyzed


def analyze(profile: Profile) -> Analysis:
    """The analysis keys of results.json for one Profile, and its diagnosis for the stages."""
    profile.validate()
    gpu = _has_gpu(profile)
    peaks = peaks_for(profile.device)
    metrics = compute_metrics(profile, peaks)
    roof = (
        roofline(profile, peaks)
        if gpu
        else {
            "bound": None,
            "arithmetic_intensity": None,
            "ridge_point": None,
            "achieved_pct_of_attainable": None,
            "source": None,
            "kernels": [],
            "reason": "no GPU",
        }
    )
    ledger = build_ledger(profile, peaks) if gpu else None
    if ledger is not None:
        metrics.update(ledger.idle_metrics(frame_source(profile, "kernels")))
    metrics.update(
        slow_step_metrics(
            steady_steps(profile),
            ledger,
            profile,
            frame_source(profile, "kernels" if gpu else "steps"),
            frame_source(profile, "ops"),
        )
    )
    ctx = Context(
        metrics=metrics,
        pools=ledger.ms_per_step() if ledger else {},
        roofline=roof,
        peaks=_rule_peaks(peaks),
        has_counters=not profile.counters.empty,
        config=config_of(profile.extras, observed_config(metrics)),
        pass_status=profile.extras.get("pass_status") or {},
        op_names=frozenset(map(str, profile.ops["name"].unique())),
    )
    findings = applicable(run_rules(ctx, gpu), gpu)
    device = profile.device
    timing = {**_timing(metrics), "step_times_ms": _step_samples_ms(profile)}
    document = {
        "device": {
            "name": device.name,
            "sm_count": device.sm_count or (peaks.sm_count.value if peaks.sm_count else None),
            "compute_capability": device.compute_capability,
            "memory_bytes": device.memory_bytes,
            "peaks": peaks.to_dict(),
            "source": device.source,
        },
        "timing": timing,
        # Where each step went on the device; with no GPU there is no device time to partition.
        "ledger": ledger.to_dict() if ledger else None,
        "metrics": {name: m.to_dict() for name, m in metrics.items()},
        "roofline": roof,
        "layers": layer_table(profile),
        "top_kernels": top_kernels(profile),
        "timeline": step_timeline(profile) if gpu else None,
        "diagnosis": None,
        "limitations": None,
        # What the run had switched on, as the injector recorded it (None for captures without it).
        "config": profile.extras.get("config"),
    }
    diagnosis = Diagnosis(
        findings, timing=timing, limitations=_limitations(profile, peaks, metrics, roof, gpu)
    )
    diagnosis.to_results(document)
    analyzed = Analyzed(profile=profile, metrics=metrics, peaks=peaks, ledger=ledger)
    return Analysis(document, diagnosis, analyzed)
