"""The ledger of one Profile: every steady step's window cut into disjoint segments (each nanosecond
once), busy where the device ran something and idle elsewhere, each with one cause and the event
behind it. Rules read its pools (time per cause per step), never each other's findings."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybrid.analysis.steps import steady_steps
from hybrid.hardware import Peaks
from hybrid.ledger import idle
from hybrid.ledger.causes import BUSY, BUSY_ORDER, IDLE, IDLE_ORDER, LABELS, STATE
from hybrid.ledger.partition import Layer, Pieces, cut, merge_runs, own
from hybrid.ledger.shortfall import kernel_causes
from hybrid.numbers import NS_PER_MS
from hybrid.profile import Profile
from hybrid.provenance import Metric
from nsight.intervals import NO_RANGE

# ref_frame and ref_row: the event behind the segment, row ref_row of Profile.<ref_frame> (NaN and -1 for
# none); state, cause and ref_frame are categoricals.
SEGMENT_COLUMNS = ("step", "start_ns", "end_ns", "state", "cause", "ref_frame", "ref_row")


@dataclass(frozen=True)
class Ledger:
    segments: pd.DataFrame  # SEGMENT_COLUMNS, sorted by start_ns
    steps: pd.DataFrame  # the steady step windows it partitions (step, start_ns, end_ns, dur_ns)

    @property
    def step_count(self) -> int:
        return len(self.steps)

    def ms_per_step(self) -> dict[str, float]:
        """Time per cause per steady step, every cause listed (0 where none), busy causes first."""
        segments = self.segments
        ns = (segments["end_ns"] - segments["start_ns"]).groupby(segments["cause"], observed=True).sum()
        n = max(self.step_count, 1)
        return {cause: float(ns.get(cause, 0)) / n / NS_PER_MS for cause in BUSY_ORDER + IDLE_ORDER}

    def pool_ms(self, *causes: str) -> float:
        per_step = self.ms_per_step()
        return sum(per_step[cause] for cause in causes)

    def step_time_ms(self) -> float:
        return float(self.steps["dur_ns"].sum()) / max(self.step_count, 1) / NS_PER_MS

    def waterfall(self) -> list[dict]:
        """ "Where the step went": one row per cause with time, busy first then idle in precedence,
        each starting where the previous ended, so the last one ends at the mean step."""
        rows, start = [], 0.0
        step = self.step_time_ms()
        for cause, ms in self.ms_per_step().items():
            if ms <= 0:
                continue
            rows.append(
                {
                    "cause": cause,
                    "state": STATE[cause],
                    "label": LABELS[cause],
                    "start_ms": start,
                    "ms": ms,
                    "pct_of_step": 100 * ms / step if step else 0.0,
                }
            )
            start += ms
        return rows

    def idle_metrics(self, source: str) -> dict[str, Metric]:
        """`idle_<cause>_ms` for every idle cause: the one partition of the device's idle time, which the
        rules' evidence and results.json's timing.idle_breakdown_ms read."""
        per_step = self.ms_per_step()
        return {f"idle_{cause}_ms": Metric(per_step[cause], "ms", source) for cause in IDLE_ORDER}

    def to_dict(self) -> dict:
        """The `ledger` block of results.json."""
        return {
            "steps": self.step_count,
            "step_time_ms": self.step_time_ms(),
            "ms_per_step": self.ms_per_step(),
            "waterfall": self.waterfall(),
        }


def _device_layers(profile: Profile, peaks: Peaks) -> list[Layer]:
    """Kernels, copies and memsets as busy layers in the precedence of causes.BUSY_CAUSES (a time two
    of them ran at once goes to the one listed first)."""
    kernels = profile.kernels.reset_index(drop=True)
    causes = kernel_causes(profile, peaks)
    frames = {
        "copy": ("memcpys", profile.memcpys.reset_index(drop=True)),
        "memset": ("memsets", profile.memsets.reset_index(drop=True)),
    }
    layers = []
    for cause in BUSY_ORDER:
        if cause in frames:
            name, frame = frames[cause]
        else:
            name, frame = "kernels", kernels[causes == cause]
        layers.append(Layer.of(cause, name, frame["start_ns"], frame["end_ns"], frame.index))
    return layers


def _gaps(idle: Pieces, *, within_steps: bool = True) -> pd.DataFrame:
    """Maximal runs of adjacent idle pieces, within one step or across step boundaries."""
    if not len(idle.start):
        return pd.DataFrame({"step": [], "start_ns": [], "end_ns": []}, dtype="int64")
    new = np.ones(len(idle.start), bool)
    new[1:] = idle.start[1:] != idle.end[:-1]
    if within_steps:
        new[1:] |= idle.step[1:] != idle.step[:-1]
    first = np.flatnonzero(new)
    return pd.DataFrame(
        {
            "step": idle.step[first],
            "start_ns": idle.start[first],
            "end_ns": idle.end[np.r_[first[1:] - 1, len(new) - 1]],
        }
    )


CAUSES = [*BUSY_ORDER, *IDLE_ORDER]
REF_FRAMES = ["kernels", "launches", "memcpys", "memsets", "ops", "syncs"]
STATES = (BUSY, IDLE)


def build_ledger(profile: Profile, peaks: Peaks) -> Ledger:
    steps = steady_steps(profile)
    windows = steps[["step", "start_ns", "end_ns"]]
    if steps.empty:
        return Ledger(pd.DataFrame({c: [] for c in SEGMENT_COLUMNS}), steps)
    device = _device_layers(profile, peaks)
    ops = profile.ops
    host_layers = [
        *idle.sync_layers(profile),
        idle.compiled_break_layer(profile, ops, windows),
        idle.dataloader_layer(profile, ops, windows),
    ]
    heavy = idle.cpu_heavy_layer(profile, ops, windows)
    pieces = cut(windows, [*device, *host_layers, heavy])
    own(pieces, device, CAUSES, REF_FRAMES)
    idle_mask = pieces.cause == NO_RANGE
    idle_pieces = pieces.subset(idle_mask)
    layers = [
        *host_layers,
        idle.after_sync_layer(profile, _gaps(idle_pieces, within_steps=False)),
        idle.launch_gap_layer(profile, _gaps(idle_pieces)),
        heavy,
    ]
    own(idle_pieces, layers, CAUSES, REF_FRAMES, "host_other")
    # Written back in place: the pieces stay in time order (no concatenation, no sort).
    for name in ("cause", "frame", "row"):
        getattr(pieces, name)[idle_mask] = getattr(idle_pieces, name)
    merged = merge_runs(pieces)
    del pieces, idle_pieces  # millions of rows no longer needed while the segment frame is built
    state = (merged.cause >= len(BUSY_ORDER)).astype(np.int8)
    segments = pd.DataFrame(
        {
            "step": merged.step,
            "start_ns": merged.start,
            "end_ns": merged.end,
            "state": pd.Categorical.from_codes(state, categories=STATES),
            "cause": pd.Categorical.from_codes(merged.cause, categories=CAUSES),
            "ref_frame": pd.Categorical.from_codes(merged.frame, categories=REF_FRAMES),
            "ref_row": merged.row,
        }
    )
    return Ledger(segments, steps)
