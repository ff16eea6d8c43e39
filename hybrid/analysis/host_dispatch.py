"""Which of the step's host-only operators (top-level ops that caused no GPU work) are the framework's own
dispatch rather than the script's code: autograd's backward nodes (`autograd::engine::evaluate_function:
...`, run by the autograd engine for every op of the forward) and the ops torch.optim runs inside its
`Optimizer.step#<Class>.step` and `Optimizer.zero_grad#...` ranges (a non-fused, non-capturable AdamW keeps
its step counts on the CPU: `aten::_foreach_add_` on them and `aten::item` for the bias correction every
step). The cpu.preprocessing finding says whose host work kept the GPU idle, and advises what removes that
owner's dispatch (hybrid.rules.cpu_residency)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.numbers import NS_PER_MS
from hybrid.profile import ANNOTATION_PREFIX, name_starts
from hybrid.provenance import Metric
from nsight.intervals import NO_RANGE, stab_overlapping

AUTOGRAD_NODE_PREFIX = "autograd::engine::evaluate_function: "
OPTIMIZER_RANGE_PREFIX = ANNOTATION_PREFIX + "Optimizer."
# Operators named in a metric's text, most host time first.
OPS_SHOWN = 3


def optimizer_ranges(ops: pd.DataFrame, host_only: pd.DataFrame) -> pd.Series:
    """Per host-only op, the torch.optim range it ran in ('Optimizer.step#AdamW.step'), '' for none: the
    range of the same thread that holds its start."""
    ranges = ops[name_starts(ops["name"], OPTIMIZER_RANGE_PREFIX)]
    out = pd.Series("", index=host_only.index, dtype=object)
    for tid, group in host_only.groupby("tid"):
        mine = ranges[ranges["tid"] == tid]
        if mine.empty:
            continue
        held = stab_overlapping(
            mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64), group["start_ns"]
        )
        names = mine["name"].astype(str).str.slice(len(ANNOTATION_PREFIX)).to_numpy(dtype=object)
        out.loc[group.index] = np.where(held != NO_RANGE, names[np.clip(held, 0, None)], "")
    return out


def ops_text(rows: pd.DataFrame, n_steps: int) -> str:
    """'torch::autograd::AccumulateGrad ×38 0.146 ms, ...': each op's calls and host time a step (rows of op
    calls with a `cpu_ns` column), most host time first."""
    by_name = rows.groupby("name")["cpu_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    parts = [
        f"{name.removeprefix(AUTOGRAD_NODE_PREFIX)} ×{row['size'] / n_steps:.0f} "
        f"{row['sum'] / n_steps / NS_PER_MS:.3g} ms"
        for name, row in by_name.head(OPS_SHOWN).iterrows()
    ]
    if len(by_name) > OPS_SHOWN:
        parts.append(f"{len(by_name) - OPS_SHOWN} more")
    return ", ".join(parts)


def dispatch_metrics(
    ops: pd.DataFrame, host_only: pd.DataFrame, n_steps: int, source: str
) -> dict[str, Metric]:
    """Host time a step of the host-only ops (rows of `ops` with a `cpu_ns` column) that autograd and the
    optimizer ran, with the ops by name; `ops`: the steps' op rows, annotations included."""
    if not n_steps:
        return {}
    autograd = host_only[name_starts(host_only["name"], AUTOGRAD_NODE_PREFIX)]
    in_range = optimizer_ranges(ops, host_only.drop(autograd.index))
    optimizer = host_only.loc[in_range.index[in_range != ""]]
    out = {
        "dispatch_autograd_ms": Metric(float(autograd["cpu_ns"].sum()) / n_steps / NS_PER_MS, "ms", source),
        "dispatch_optimizer_ms": Metric(float(optimizer["cpu_ns"].sum()) / n_steps / NS_PER_MS, "ms", source),
    }
    if not autograd.empty:
        out["dispatch_autograd_ops"] = Metric(ops_text(autograd, n_steps), "", source)
    if not optimizer.empty:
        out["dispatch_optimizer_ops"] = Metric(ops_text(optimizer, n_steps), "", source)
        out["dispatch_optimizer_range"] = Metric(str(in_range[in_range != ""].mode().iloc[0]), "", source)
    return out
