"""Intervals measured on the torch pass's clock, carried onto the analyzed timeline.

When the timeline analyzed is nsys's, the operators (and the record_function ranges among them:
DataLoader fetches, compiled regions) were timed in another run of the same steps under
torch.profiler, which slows a step differently (graph_breaks on the H200: 17.8 ms a step under
torch.profiler, 12.9 under nsys). An interval keeps its place as a share of its own step: its offsets
from the start of step k of its pass, scaled by the ratio of the two step k windows, placed in step k
of the analyzed timeline. This is the only place such intervals change clock.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def carry_to_analyzed_clock(
    events: pd.DataFrame, own_steps: pd.DataFrame | None, analyzed_steps: pd.DataFrame
) -> pd.DataFrame:
    """`events` (step, start_ns, end_ns, any other columns) on the analyzed clock: rows of steps the
    analyzed timeline does not have are dropped, the rest keep their index. `own_steps` are the step
    windows of the events' own pass, None when they already are on the analyzed clock."""
    kept = events[events["step"].isin(analyzed_steps["step"])]
    if own_steps is None:
        return kept
    kept = kept[kept["step"].isin(own_steps["step"])]
    to = analyzed_steps.set_index("step").loc[kept["step"], ["start_ns", "end_ns"]].to_numpy(np.int64)
    own = own_steps.set_index("step").loc[kept["step"], ["start_ns", "end_ns"]].to_numpy(np.int64)
    own_dur = np.maximum(own[:, 1] - own[:, 0], 1)
    scale = (to[:, 1] - to[:, 0]) / own_dur

    def carry(t: np.ndarray) -> np.ndarray:
        offset = np.clip(t - own[:, 0], 0, own_dur)
        return to[:, 0] + np.rint(offset * scale).astype(np.int64)

    return kept.assign(
        start_ns=carry(kept["start_ns"].to_numpy(np.int64)), end_ns=carry(kept["end_ns"].to_numpy(np.int64))
    )
