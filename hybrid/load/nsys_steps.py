"""Where the steps of an Nsight Systems export lie, in order of preference:
1. our injector's NVTX ranges `step N` in domain `hybrid`            -> step_source "nvtx:hybrid"
   (N below the measured steps that the injector's inject.json reports: a range it closed because
   the script ended mid-step is not a measured step)
2. the user's ranges named `step_range` (exact text, else prefix)     -> "nvtx:<NAME>"
3. a repeating NVTX range name (see _repeating_ranges)               -> "pattern"
4. periodicity of the launching thread's CUDA calls (hybrid.load.periodicity), start-up excluded and
   early steps dropped until their times settle                         -> "periodicity"
5. the window from the first kernel launch to the end, as one step, with a warning
                                                                      -> "steady-window"
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from hybrid.errors import InputError
from hybrid.load import periodicity, settle
from hybrid.load.nsys_runtime import TID_MASK, Columns, Runtime, pid_of
from hybrid.markers import MODULE_DOMAIN, STEP_DOMAIN
from hybrid.profile import STEP_COLUMNS, conform
from nsight.intervals import step_of
from nsight.sqlite_export import WHOLE_CAPTURE, NsysExport

OUR_STEP_TEXT = re.compile(r"^step (\d+)$")


# Pattern detection: a range name must repeat at least this often to be taken for a step (two
# could be "train" and "eval" phases; three is the fewest that looks like a loop).
MIN_PATTERN_REPEATS = 3
# Names that say "one iteration" win over longer repeating ranges such as epochs.
STEP_LIKE_WORDS = re.compile(r"step|iter|batch", re.IGNORECASE)
TRAILING_INDEX = re.compile(r"[\s_#:.-]*\d+$")
# NVTX domains of CUDA libraries (CUB/Thrust, NCCL): their ranges wrap library calls, not the user's steps.
LIBRARY_DOMAINS = ("CCCL", "NCCL", "NVSHMEM", "cuBLAS", "cuDNN")
MIN_PATTERN_COVERAGE = 0.1  # share of the time from the first to the last range that the ranges cover


class Steps:
    """Step ranges, kept per process for attribution; `frame` is the Profile.steps view."""

    def __init__(
        self,
        ranges: pd.DataFrame,
        source: str,
        unit: str | None = None,
        confidence: str | None = None,
        reason: str | None = None,
    ) -> None:
        # ranges: step, name, start_ns, end_ns, global_pid
        self.ranges = ranges.sort_values("start_ns").reset_index(drop=True)
        self.source = source
        self.unit, self.confidence, self.reason = unit, confidence, reason
        union = (
            self.ranges.groupby("step", sort=True)
            .agg(name=("name", "first"), start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
            .reset_index()
        )
        self.frame = conform(union, STEP_COLUMNS)

    def within(self, start_ns: int, end_ns: int) -> Steps:
        """The steps that lie inside [start_ns, end_ns]; a steady window is clipped to it instead."""
        if self.source == "steady-window":
            ranges = self.ranges.assign(
                start_ns=self.ranges["start_ns"].clip(lower=start_ns),
                end_ns=self.ranges["end_ns"].clip(upper=end_ns),
            )
        else:
            inside = self.frame[(self.frame["start_ns"] >= start_ns) & (self.frame["end_ns"] <= end_ns)]
            ranges = self.ranges[self.ranges["step"].isin(inside["step"])]
        return Steps(ranges, self.source, self.unit, self.confidence, self.reason)

    def assign(self, times: np.ndarray, global_ids: np.ndarray) -> np.ndarray:
        """Step of each event (host time `times`, thread or process id `global_ids`), -1 outside."""
        frame = self.frame
        out = step_of(
            times, frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy(), frame["step"].to_numpy()
        )
        pids = self.ranges["global_pid"].unique()
        if len(pids) > 1:  # one set of step ranges per rank: each process follows its own
            event_pids = pid_of(global_ids)
            for pid in pids:
                own = self.ranges[self.ranges["global_pid"] == pid]
                mask = event_pids == pid_of(np.array([pid]))[0]
                out[mask] = step_of(
                    times[mask], own["start_ns"].to_numpy(), own["end_ns"].to_numpy(), own["step"].to_numpy()
                )
        return out


def nvtx_ranges(export: NsysExport, window: dict = WHOLE_CAPTURE) -> pd.DataFrame:
    frame = export.frame("nvtx_ranges", window)
    if frame is None or frame.empty:
        return pd.DataFrame(
            {
                "start_ns": np.empty(0, np.int64),
                "end_ns": np.empty(0, np.int64),
                "text": pd.Series(dtype=object),
                "global_tid": np.empty(0, np.int64),
                "domain": pd.Series(dtype=object),
            }
        )
    frame["start_ns"] = frame["start_ns"].astype(np.int64)
    frame["end_ns"] = frame["end_ns"].astype(np.int64)
    frame["global_tid"] = frame["global_tid"].astype(np.int64)
    return frame


def _with_pid(ranges: pd.DataFrame) -> pd.DataFrame:
    out = ranges.copy()
    out["global_pid"] = out["global_tid"].to_numpy() & ~TID_MASK
    return out


def _outermost(ranges: pd.DataFrame) -> pd.DataFrame:
    """Drop ranges that lie inside another of the same set and process (a nested 'step' range)."""
    kept = []
    for _, group in ranges.sort_values(["start_ns", "end_ns"], ascending=[True, False]).groupby("global_pid"):
        reach = np.maximum.accumulate(group["end_ns"].to_numpy())
        inside = np.zeros(len(group), dtype=bool)
        inside[1:] = group["end_ns"].to_numpy()[1:] <= reach[:-1]
        kept.append(group[~inside])
    return pd.concat(kept) if kept else ranges


def _numbered(ranges: pd.DataFrame, source: str) -> Steps:
    """Number ranges 0.. in time order within each process."""
    ranges = _outermost(_with_pid(ranges)).sort_values("start_ns")
    ranges["step"] = ranges.groupby("global_pid").cumcount()
    ranges = ranges.rename(columns={"text": "name"})
    return Steps(ranges[["step", "name", "start_ns", "end_ns", "global_pid"]], source)


def _our_steps(nvtx: pd.DataFrame, measured_steps: int | None, warnings: list[str]) -> Steps | None:
    ours = nvtx[(nvtx["domain"] == STEP_DOMAIN) & nvtx["text"].fillna("").str.match(OUR_STEP_TEXT)]
    if ours.empty:
        return None
    ranges = _with_pid(ours).rename(columns={"text": "name"})
    ranges["step"] = ranges["name"].str.extract(OUR_STEP_TEXT, expand=False).astype(np.int64)
    if measured_steps is not None:
        beyond = ranges["step"] >= measured_steps
        if beyond.any():
            dropped = ", ".join(str(n) for n in sorted(ranges.loc[beyond, "step"].unique()))
            warnings.append(
                f"NVTX step range(s) {dropped} dropped: the injector measured {measured_steps} "
                "step(s) (the script ended during the next one); their work counts as outside steps"
            )
            ranges = ranges[~beyond]
        if ranges.empty:
            return None
    return Steps(ranges[["step", "name", "start_ns", "end_ns", "global_pid"]], f"nvtx:{STEP_DOMAIN}")


def _named_steps(nvtx: pd.DataFrame, name: str) -> Steps:
    user = nvtx[~nvtx["domain"].isin([STEP_DOMAIN, MODULE_DOMAIN])]
    text = user["text"].fillna("")
    matched = user[text == name]
    if matched.empty:
        matched = user[text.str.startswith(name)]
    if matched.empty:
        seen = ", ".join(repr(t) for t in text.value_counts().index[:10]) or "none"
        raise InputError(
            f"no NVTX range is named {name!r} or starts with it (ranges in the export: {seen})",
            "pass --step-range with the text of the range that wraps one training step",
        )
    return _numbered(matched, f"nvtx:{name}")


def _repeating_ranges(nvtx: pd.DataFrame) -> Steps | None:
    """The user's NVTX ranges that look like a loop body: same name once the trailing index is
    removed ('step3' -> 'step'), on one thread, at least MIN_PATTERN_REPEATS times, not
    overlapping each other. Step-like names ('step', 'iter', 'batch') win; then the name whose
    ranges cover the most time (the iteration encloses its forward/backward ranges)."""
    user = nvtx[
        ~nvtx["domain"].isin([STEP_DOMAIN, MODULE_DOMAIN, *LIBRARY_DOMAINS]) & nvtx["text"].notna()
    ].copy()
    if user.empty:
        return None
    user["base"] = user["text"].str.replace(TRAILING_INDEX, "", regex=True)
    best, best_score = None, None
    for (_, base), group in user.groupby(["global_tid", "base"]):
        if len(group) < MIN_PATTERN_REPEATS:
            continue
        ordered = group.sort_values("start_ns")
        if (ordered["start_ns"].to_numpy()[1:] < ordered["end_ns"].to_numpy()[:-1]).any():
            continue
        span = ordered["end_ns"].iloc[-1] - ordered["start_ns"].iloc[0]
        if span <= 0 or (ordered["end_ns"] - ordered["start_ns"]).sum() < MIN_PATTERN_COVERAGE * span:
            continue  # a library call's range that happens to repeat (cub's scans), not a loop body
        score = (bool(STEP_LIKE_WORDS.search(base)), int((ordered["end_ns"] - ordered["start_ns"]).sum()))
        if best_score is None or score > best_score:
            best, best_score = ordered, score
    if best is None:
        return None
    steps = _numbered(best.drop(columns="base"), "pattern")
    name = str(best["base"].iloc[0])
    steps.unit, steps.confidence = f"one {name!r} NVTX range", "medium"
    steps.reason = f"the NVTX range {name!r} repeats {len(best)} times on one thread without overlapping"
    return steps


def _launch_sequence(runtime: Runtime, raw_kernels: Columns | None) -> tuple[Columns, int] | None:
    """The CUDA calls of the thread that launched the most kernels, in order, each with its symbol:
    the launched kernel's name id, else the API's name id (both StringIds ids, so they never clash)."""
    calls = runtime.calls
    if raw_kernels is None or not len(raw_kernels["start_ns"]) or not len(calls["start_ns"]):
        return None
    rows = runtime.launch_of(raw_kernels["global_pid"], raw_kernels["correlation"])
    found = rows >= 0
    if not found.any():
        return None
    symbols = calls["name_id"].copy()
    symbols[rows[found]] = raw_kernels["name_id"][found]
    threads, launches = np.unique(calls["global_tid"][rows[found]], return_counts=True)
    thread = int(threads[np.argmax(launches)])
    mine = calls["global_tid"] == thread
    return {
        "symbol": symbols[mine],
        "start_ns": calls["start_ns"][mine],
        "end_ns": calls["end_ns"][mine],
    }, thread


def _periodic_steps(
    runtime: Runtime, raw_kernels: Columns | None, bounds: tuple[int, int], windowed: bool = False
) -> Steps | None:
    """Steps from the repeating CUDA call sequence of the launching thread (hybrid.load.periodicity):
    start-up before the steady region is excluded, then early steps are dropped until they settle."""
    found = _launch_sequence(runtime, raw_kernels)
    if found is None:
        return None
    sequence, thread = found
    period = periodicity.find_period(sequence["symbol"], sequence["start_ns"], sequence["end_ns"])
    if period is None:
        return None
    starts_ns = sequence["start_ns"][period.starts]
    durations = np.diff(starts_ns)
    first, settled = settle.settled_start(list(durations / 1e6), min_drop=1)
    # Windows are closed intervals: a step ends just before the next one's first call.
    starts, ends = starts_ns[first:-1], starts_ns[first + 1 :] - 1
    if len(starts) < periodicity.MIN_REPEATS:
        return None
    ranges = pd.DataFrame(
        {
            "step": np.arange(len(starts), dtype=np.int64),
            "name": [f"period {i}" for i in range(len(starts))],
            "start_ns": starts,
            "end_ns": ends,
            "global_pid": thread & ~TID_MASK,
        }
    )
    startup_s = (starts[0] - bounds[0]) / 1e9
    how = {
        "shortest": "the shortest unit that repeats",
        "regular symbol": "the shortest unit that holds every regularly recurring kernel",
        "host gap": "the multiple of a repeating block that the script's host gap marks",
    }[period.how]
    reason = (
        f"the launching thread's CUDA calls repeat every {period.period} calls ({period.match:.0%} of the "
        f"steady tail; {how}); the first {startup_s:.2f} s of CUDA activity "
        f"{'read for the analyzed window' if windowed else '(start-up)'} excluded, "
        f"{first + 1} early step(s) dropped" + ("" if settled else " (step times did not settle)")
    )
    confidence = "medium" if period.match >= 0.95 and settled else "low"
    return Steps(
        ranges, "periodicity", f"one repeat of a {period.period}-call CUDA sequence", confidence, reason
    )


def _steady_window(bounds: tuple[int, int], first_launch_ns: int | None) -> Steps:
    start = first_launch_ns if first_launch_ns is not None and first_launch_ns > bounds[0] else bounds[0]
    ranges = pd.DataFrame(
        {
            "step": [0],
            "name": ["steady window"],
            "start_ns": [start],
            "end_ns": [bounds[1]],
            "global_pid": [-1],
        }
    )
    reason = (
        f"no repeating unit was found (no step marks, no repeating NVTX range, no periodic CUDA call "
        f"sequence); {(start - bounds[0]) / 1e9:.2f} s before the first kernel launch excluded"
    )
    return Steps(
        ranges, "steady-window", "the capture after the first kernel launch, as one range", "low", reason
    )


def find_steps(
    nvtx: pd.DataFrame,
    step_range: str | None,
    bounds: tuple[int, int],
    measured_steps: int | None,
    warnings: list[str],
    runtime: Runtime | None = None,
    raw_kernels: Columns | None = None,
    windowed: bool = False,
) -> Steps:
    if step_range:
        steps = _named_steps(nvtx, step_range)
        steps.unit, steps.confidence = f"one {step_range!r} NVTX range", "high"
        steps.reason = "--step-range names the range"
        warnings.append(
            f"steps are the {len(steps.frame)} NVTX ranges named {step_range!r} "
            "(--step-range), not hybrid's own step markers"
        )
        return steps
    steps = _our_steps(nvtx, measured_steps, warnings)
    if steps is not None:
        return steps
    steps = _repeating_ranges(nvtx)
    if steps is not None:
        warnings.append(
            f"no hybrid step markers in the export; steps were guessed from {len(steps.frame)} "
            f"repeating NVTX ranges ({steps.frame['name'].iloc[0]!r}, ...); pass --step-range "
            "NAME to choose the range yourself"
        )
        return steps
    if runtime is not None:
        steps = _periodic_steps(runtime, raw_kernels, bounds, windowed)
        if steps is not None:
            warnings.append(
                f"no step markers in the export: {len(steps.frame)} steps were found from the "
                f"periodicity of the CUDA calls ({steps.reason}); pass --step-range NAME to choose "
                "an NVTX range instead"
            )
            return steps
    first_launch = None
    if runtime is not None and raw_kernels is not None and len(raw_kernels["start_ns"]):
        rows = runtime.launch_of(raw_kernels["global_pid"], raw_kernels["correlation"])
        launched = runtime.calls["start_ns"][rows[rows >= 0]]
        first_launch = int(launched.min()) if len(launched) else None
    steps = _steady_window(bounds, first_launch)
    warnings.append(
        "no step was found in the export (no step markers, no repeating NVTX ranges, no periodic "
        "CUDA calls): the capture after the first kernel launch is analyzed as one range, so "
        "per-step figures are totals; mark steps (hybrid.mark_step(), an NVTX range) or pass "
        "--step-range NAME"
    )
    return steps
