"""The ncu pass's two jobs around the profiler run: choose which kernels are worth replaying (from the
nsys timeline; hybrid.collect.ncu_plan decides whether counters can change the diagnosis at all), and match
the counters ncu measured back to every kernel instance in the Profile (Profile.kernel_counters).

Matching key: nsys and ncu demangle C++ names differently ('at::native::f<(int)4>' vs 'at::f<4>'),
so kernels are matched on the signature both names reduce to (nsight.ncu.kernel_signature: template
arguments kept, so two instantiations of one template launched alike are told apart) plus launch
configuration (grid, block), and, within one step, on launch order: the k-th launch of a
(name, grid, block) in a step gets the k-th profiled launch of it. ncu profiles one measured step,
so this pairs instances exactly wherever the steps launch the same sequence, which a training or
inference loop does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from hybrid.errors import nsight_errors_as_hybrid
from hybrid.hardware import peaks_for
from hybrid.load.plausible import drop_implausible_counters
from hybrid.profile import (
    COUNTER_COLUMNS,
    KERNEL_COUNTER_COLUMNS,
    LAUNCH_CONFIG_COLUMNS,
    MATCH_CONFIG,
    MATCH_LAUNCH,
    MATCH_NAME,
    MATCH_NONE,
    Profile,
    conform,
    is_communication,
)
from hybrid.provenance import MEASURED_NCU
from nsight.ncu import function_base_name, kernel_signature
from nsight.ncu_csv import NcuCounters, read_ncu_csv

DEFAULT_COVERAGE = 0.9
# More names cost more replay time for little: GPU time is usually concentrated in a handful of
# kernels, and those past the cap are listed as not profiled.
DEFAULT_CAP = 12
# How many unprofiled kernels extras["ncu"] lists by name (largest GPU time first).
NOT_PROFILED_LISTED = 20
# Below this share of measured GPU time with counters, the report warns that ncu saw too little.
LOW_COVERAGE_PCT = 50.0

_KEY = ["signature", *LAUNCH_CONFIG_COLUMNS]


def _durations(kernels: pd.DataFrame) -> pd.Series:
    return (kernels["end_ns"] - kernels["start_ns"]).clip(lower=0)


def representative_step(kernels: pd.DataFrame) -> int | None:
    """The measured step whose kernel time is the median one (the first and last steps are the most
    likely to hold one-off work); None when no kernel lies in a measured step."""
    measured = kernels[kernels["step"] >= 0]
    if measured.empty:
        return None
    per_step = _durations(measured).groupby(measured["step"]).sum().sort_values(kind="stable")
    return int(per_step.index[(len(per_step) - 1) // 2])


def select_kernels(
    kernels: pd.DataFrame,
    coverage: float = DEFAULT_COVERAGE,
    cap: int = DEFAULT_CAP,
    *,
    step: int | None = None,
) -> list[str]:
    """The fewest kernel names whose GPU time in one measured step reaches `coverage` of that step's
    kernel time, at most `cap` of them, largest first. NCCL kernels are never chosen (they hang
    when replayed). `step` defaults to representative_step; with no measured step, the whole capture
    is used."""
    candidates = kernels[~is_communication(kernels["name"])] if len(kernels) else kernels
    if step is None:
        step = representative_step(candidates)
    if step is not None:
        candidates = candidates[candidates["step"] == step]
    if candidates.empty or cap <= 0:
        return []
    per_name = _durations(candidates).groupby(candidates["name"], observed=True).sum()
    # Largest first; ties by name so the choice is reproducible.
    ordered = sorted(per_name.items(), key=lambda item: (-item[1], item[0]))
    total = float(per_name.sum())
    chosen: list[str] = []
    covered = 0.0
    for name, time_ns in ordered[:cap]:
        chosen.append(name)
        covered += float(time_ns)
        if total <= 0 or covered >= coverage * total:
            break
    return chosen


def _with_keys(frame: pd.DataFrame) -> pd.DataFrame:
    keyed = frame.copy()
    # Plain strings: a categorical key would make the groupbys below span unobserved combinations.
    keyed["signature"] = keyed["name"].map(kernel_signature).astype(object)
    keyed["base"] = keyed["name"].map(function_base_name).astype(object)
    return keyed


def _kernel_order(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernels with their key and launch position within their step (by host launch time when
    known, else device start)."""
    keyed = _with_keys(kernels)
    keyed["row"] = range(len(keyed))
    keyed["order_ns"] = keyed["launch_ns"].where(keyed["launch_ns"] >= 0, keyed["start_ns"])
    keyed = keyed.sort_values(["step", "order_ns", "start_ns"], kind="stable")
    keyed["occurrence"] = keyed.groupby(["step", *_KEY], sort=False).cumcount()
    return keyed.sort_values("row")


def _match(kernels: pd.DataFrame, counters: pd.DataFrame) -> tuple[list[int], list[str]]:
    """For each kernel row, the counter row it takes (-1 for none) and the match level."""
    kern = _kernel_order(kernels)
    ctr = _with_keys(counters)
    ctr["counter_row"] = range(len(ctr))
    ctr["occurrence"] = ctr.groupby(_KEY, sort=False).cumcount()

    rows = pd.Series(-1, index=kern["row"].to_numpy(), dtype="int64")
    levels = pd.Series(MATCH_NONE, index=kern["row"].to_numpy(), dtype="object")

    by_launch = kern.merge(ctr[[*_KEY, "occurrence", "counter_row"]], on=[*_KEY, "occurrence"], how="inner")
    rows[by_launch["row"].to_numpy()] = by_launch["counter_row"].to_numpy()
    levels[by_launch["row"].to_numpy()] = MATCH_LAUNCH

    first_per_config = ctr.drop_duplicates(_KEY)[[*_KEY, "counter_row"]]
    rest = kern[rows.loc[kern["row"]].to_numpy() < 0]
    by_config = rest.merge(first_per_config, on=_KEY, how="inner")
    rows[by_config["row"].to_numpy()] = by_config["counter_row"].to_numpy()
    levels[by_config["row"].to_numpy()] = MATCH_CONFIG

    first_per_name = ctr.drop_duplicates("base")[["base", "counter_row"]]
    rest = kern[rows.loc[kern["row"]].to_numpy() < 0]
    by_name = rest.merge(first_per_name, on="base", how="inner")
    rows[by_name["row"].to_numpy()] = by_name["counter_row"].to_numpy()
    levels[by_name["row"].to_numpy()] = MATCH_NAME
    return rows.sort_index().tolist(), levels.sort_index().tolist()


def _renamed_counters(
    counters: pd.DataFrame, kernels: pd.DataFrame, rows: list[int], levels: list[str]
) -> tuple[pd.DataFrame, dict[str, str], int]:
    """Counters named as profile.kernels names them, so consumers can join on (name, grid, block);
    also the nsys -> ncu name map and how many counter rows matched no kernel."""
    renamed = counters.copy()
    ncu_names: dict[str, str] = {}
    unmatched = 0
    # The kernel rows each counter row took by launch or configuration, gathered in one pass: a scan of every
    # kernel per counter row cost 1.2 ms a row on the committed captures, minutes on a 1M-kernel export.
    strong_rows: dict[int, list[int]] = {}
    for i, (r, lvl) in enumerate(zip(rows, levels, strict=True)):
        if lvl in (MATCH_LAUNCH, MATCH_CONFIG):
            strong_rows.setdefault(r, []).append(i)
    for counter_row in range(len(counters)):
        strong = strong_rows.get(counter_row)
        if not strong:
            unmatched += 1
            continue
        nsys_name = kernels["name"].iloc[strong].mode().iloc[0]
        ncu_names[nsys_name] = counters["name"].iloc[counter_row]
        renamed.iloc[counter_row, renamed.columns.get_loc("name")] = nsys_name
    return renamed, ncu_names, unmatched


def read_counters(path: Path) -> NcuCounters:
    """ncu's counter CSV (nsight.ncu_csv, either layout) with its frame conformed to the Profile's
    COUNTER_COLUMNS. InputError when the file cannot be read, holds no table, or the table no kernel."""
    with nsight_errors_as_hybrid():
        parsed = read_ncu_csv(path)
    return dataclasses.replace(parsed, frame=conform(parsed.frame, COUNTER_COLUMNS))


def attach_counters(profile: Profile, counters: NcuCounters | pd.DataFrame) -> Profile:
    """A copy of `profile` with ncu's counters attached.

    `profile.counters` gets the counter rows, renamed to the kernel names of `profile.kernels`
    wherever a launch matched (so a join on name + grid + block works); `profile.kernel_counters` the
    counter row each kernel takes and how strongly it matched (hybrid.profile.counters_per_kernel joins
    them); `extras["ncu"]` the share of measured GPU time covered, the kernels not profiled, replay
    passes and missing metrics.
    """
    parsed = counters if isinstance(counters, NcuCounters) else NcuCounters(frame=counters)
    frame, implausible = drop_implausible_counters(
        conform(parsed.frame, COUNTER_COLUMNS), peaks_for(profile.device)
    )
    kernels = profile.kernels.reset_index(drop=True)
    rows, levels = (
        _match(kernels, frame)
        if len(kernels) and len(frame)
        else ([-1] * len(kernels), [MATCH_NONE] * len(kernels))
    )
    renamed, ncu_names, unmatched = _renamed_counters(frame, kernels, rows, levels)

    durations = _durations(kernels)
    in_steps = (
        (kernels["step"] >= 0) if (kernels["step"] >= 0).any() else pd.Series(True, index=kernels.index)
    )
    level = pd.Series(levels, index=kernels.index, dtype="object")
    total_ns = float(durations[in_steps].sum())

    def share(mask: pd.Series) -> float:
        return round(100.0 * float(durations[in_steps & mask].sum()) / total_ns, 2) if total_ns > 0 else 0.0

    covered_pct = share(level.isin([MATCH_LAUNCH, MATCH_CONFIG]))
    missed = durations[in_steps & (level == MATCH_NONE)].groupby(kernels["name"], observed=True).sum()
    missed = missed.sort_values(ascending=False, kind="stable").head(NOT_PROFILED_LISTED)

    warnings = list(profile.warnings) + implausible
    if total_ns > 0 and covered_pct < LOW_COVERAGE_PCT:
        warnings.append(
            f"ncu counters cover only {covered_pct:.1f}% of the measured GPU time; "
            "kernel-level conclusions rest on the profiled kernels (results.json: metrics ncu_*)"
        )
    extras = dict(profile.extras)
    extras["ncu"] = {
        "covered_gpu_time_pct": covered_pct,
        "name_only_gpu_time_pct": share(level == MATCH_NAME),
        "kernels_not_profiled": [{"name": name, "gpu_time_ns": int(ns)} for name, ns in missed.items()],
        "unmatched_counter_rows": unmatched,
        "ncu_names": ncu_names,
        "replay_passes": parsed.replay_passes,
        "missing_metrics": list(parsed.missing_metrics),
        "notes": list(parsed.notes),
    }
    sources = dict(profile.sources)
    sources["counters"] = MEASURED_NCU
    kernel_counters = conform(
        pd.DataFrame({"counter_row": rows, "counter_match": levels}, columns=list(KERNEL_COUNTER_COLUMNS)),
        KERNEL_COUNTER_COLUMNS,
    )
    return dataclasses.replace(
        profile,
        counters=renamed,
        kernel_counters=kernel_counters,
        extras=extras,
        sources=sources,
        warnings=warnings,
    )
