"""The report's tables of the steady steps: the kernels holding the most GPU time (with the launch
configuration each spent most of it in) and the GPU time per module range.
"""

from __future__ import annotations

import pandas as pd

from hybrid.analysis.steps import frame_source, in_steps, steady_steps
from hybrid.numbers import NS_PER_MS, NS_PER_US
from hybrid.profile import LAUNCH_CONFIG_COLUMNS, Profile


def top_kernels(profile: Profile, limit: int = 10) -> list[dict]:
    steps = steady_steps(profile)
    k = in_steps(profile.kernels, steps)
    if k.empty:
        return []
    n = len(steps)
    k = k.assign(ns=k["end_ns"] - k["start_ns"])
    g = k.groupby("name")["ns"].agg(["size", "sum", "mean"]).sort_values("sum", ascending=False)
    total = g["sum"].sum()
    src = frame_source(profile, "kernels")
    launches = launch_configs(k[k["name"].isin(g.head(limit).index)])
    return [
        {
            "name": name,
            "calls_per_step": row["size"] / n,
            "total_ms_per_step": row["sum"] / n / NS_PER_MS,
            "mean_us": row["mean"] / NS_PER_US,
            "share_pct": 100 * row["sum"] / total,
            "source": src,
            **launches.get(name, {}),
        }
        for name, row in g.head(limit).iterrows()
    ]


def launch_configs(kernels: pd.DataFrame) -> dict[str, dict]:
    """Per kernel name (with an `ns` column of durations): the launch configuration that took the most
    time, {grid: [x, y, z], block: [x, y, z]}, and how many distinct ones the name ran with
    (`launch_configs`); names whose launches carry no configuration (-1 or 0) are left out."""
    if kernels.empty or not set(LAUNCH_CONFIG_COLUMNS) <= set(kernels.columns):
        return {}
    known = kernels[(kernels[list(LAUNCH_CONFIG_COLUMNS)] > 0).all(axis=1)]
    by_config = known.groupby(["name", *LAUNCH_CONFIG_COLUMNS])["ns"].sum().reset_index()
    out = {}
    for name, configs in by_config.groupby("name"):
        top = configs.loc[configs["ns"].idxmax()]
        out[name] = {
            "grid": [int(top[c]) for c in LAUNCH_CONFIG_COLUMNS[:3]],
            "block": [int(top[c]) for c in LAUNCH_CONFIG_COLUMNS[3:]],
            "launch_configs": len(configs),
        }
    return out


def layer_table(profile: Profile, limit: int = 30) -> list[dict]:
    """GPU time per module range (the kernels' `layer` column), per step."""
    steps = steady_steps(profile)
    k = in_steps(profile.kernels, steps)
    k = k[k["layer"].notna()]
    if k.empty:
        return []
    n = len(steps)
    step_ns = steps["dur_ns"].mean()
    k = k.assign(ns=k["end_ns"] - k["start_ns"])
    g = k.groupby("layer")["ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    src = frame_source(profile, "kernels")
    return [
        {
            "name": name,
            "gpu_ms": row["sum"] / n / NS_PER_MS,
            "kernels": row["size"] / n,
            "share_of_step_pct": 100 * row["sum"] / n / step_ns,
            "source": src,
        }
        for name, row in g.head(limit).iterrows()
    ]
