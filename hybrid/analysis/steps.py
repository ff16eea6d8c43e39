"""The measured steps of a Profile: each step's window on both clocks, the steady ones averaged over, and
the per-step helpers every per-step figure is made with.

A step more than OUTLIER_STEP_FACTOR x the median is a one-off (lazy init, a recompile, a checkpoint): it
is measured, never averaged in, unless such steps recur (steady_mask): then they are the loop's own
cost. The windows are derived from the profile's frames once and kept on it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from hybrid.profile import Profile
from hybrid.provenance import MEASURED_NSYS, MEASURED_TORCH

# A step this many times the median is an outlier (first-step init, recompilation); 3x is the usual
# cut for one-off stalls in step-time traces and keeps normal jitter (CV of a few %) inside.
OUTLIER_STEP_FACTOR = 3.0
# Outliers among the steps after the first, this many or more, recur: a periodic stall is the loop's own
# cost and stays in the mean. Left out, a loop that gc.collect()s every 4th step (150-190 ms on the H100)
# read as 0.98 ms steps where it ran 39-51 ms a step, and its plain baseline as 52x the profiled step.
RECURRING_OUTLIERS = 2


def frame_source(profile: Profile, frame: str) -> str:
    """Provenance of a frame; a loader that did not say is assumed to be its step source's tool."""
    if frame in profile.sources:
        return profile.sources[frame]
    return MEASURED_TORCH if profile.step_source.startswith("torch") else MEASURED_NSYS


def _derived(profile: Profile, name: str, compute: Callable[[Profile], pd.DataFrame]) -> pd.DataFrame:
    """A frame derived from the profile's steps and device frames, computed once and read everywhere (one
    resnet50 analysis asked for the steady steps 11 times): kept on the profile beside the frames it was
    computed from, and computed again when one of them was replaced. Each caller gets its own copy."""
    inputs = (profile.steps, profile.kernels, profile.memcpys, profile.memsets)
    held = profile.derived.get(name)
    if held is None or any(a is not b for a, b in zip(held[0], inputs, strict=True)):
        held = profile.derived[name] = (inputs, compute(profile))
    return held[1].copy()


def step_windows(profile: Profile) -> pd.DataFrame:
    return _derived(profile, "step_windows", _step_windows)


def _step_windows(profile: Profile) -> pd.DataFrame:
    """Each measured step's window from both clocks (step_bounds), in time order; `host_*` keep the
    ranges as recorded."""
    steps = profile.steps.sort_values("start_ns", kind="stable").reset_index(drop=True)
    out = steps.assign(host_start_ns=steps["start_ns"], host_end_ns=steps["end_ns"])
    if steps.empty:
        return out.assign(dur_ns=pd.Series(dtype="int64"))
    device_ends = [
        f.groupby("step")["end_ns"].max()
        for f in (profile.kernels, profile.memcpys, profile.memsets)
        if not f.empty
    ]
    device_end = pd.concat(device_ends, axis=1).max(axis=1) if device_ends else pd.Series(dtype="int64")
    device_end = device_end.reindex(steps["step"]).to_numpy(dtype=float)
    starts, ends = step_bounds(
        steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64), device_end
    )
    return out.assign(start_ns=starts, end_ns=ends, dur_ns=ends - starts)


def step_bounds(
    host_start: np.ndarray, host_end: np.ndarray, device_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each step's (start, end) from its host range and the end of the device work launched inside it
    (NaN or -inf: none), steps in time order, in host_start's dtype. The replay takes its replayed
    steps' windows here too (hybrid.replay.graph.step_windows), so measured and replayed steps are
    measured alike.

    The host ranges alone are wrong when the host runs ahead of the GPU (no sync in the loop): they
    close as soon as the launches are queued, while the device is still busy with that step's work
    (measured on the H200: tc_fp32_no_tf32 has host ranges of 2-3 ms for 60 ms of GEMMs each, the
    whole backlog landing in the last range, where the injector syncs). A step ends when both its host
    range and the last device activity launched inside it have ended; it starts when its host range
    opens, or when the previous step ended if that is later (the queue was still busy). With back-to-
    back ranges (our injector) this is end[i] - end[i-1]; non-adjacent ranges (--step-range on a
    user's NVTX range) do not charge the time between them."""
    ends = np.fmax(host_end, device_end).astype(host_start.dtype)
    starts = host_start.copy()
    starts[1:] = np.maximum(starts[1:], ends[:-1])
    return starts, ends


def steady_steps(profile: Profile) -> pd.DataFrame:
    """The measured steps without outliers (over OUTLIER_STEP_FACTOR x the median step)."""
    return _derived(profile, "steady_steps", _steady_steps)


def _steady_steps(profile: Profile) -> pd.DataFrame:
    steps = step_windows(profile)
    return steps[steady_mask(steps["dur_ns"].to_numpy())]


def steady_mask(step_ns: np.ndarray) -> np.ndarray:
    """Which steps (in time order) are steady: those no longer than OUTLIER_STEP_FACTOR x the median,
    and every step after the first where RECURRING_OUTLIERS or more of those are outliers. The replay
    masks its replayed steps here too."""
    if not len(step_ns):
        return np.zeros(0, bool)
    steady = step_ns <= OUTLIER_STEP_FACTOR * float(np.median(step_ns))
    if np.count_nonzero(~steady[1:]) >= RECURRING_OUTLIERS:
        steady[1:] = True
    return steady


def in_steps(frame: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The rows of `frame` (with a `step` column) that belong to one of `steps`."""
    return frame[frame["step"].isin(steps["step"])]


def per_step(total: float, n_steps: int) -> float:
    """A total over `n_steps` steps as its mean per step; 0 with no step."""
    return float(total) / n_steps if n_steps else 0.0
