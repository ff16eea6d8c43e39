"""Why step time varies: the steady steps after the first, the slow ones (over SLOW_STEP_FACTOR x their
median; the stalls alone where outliers recur, steps.steady_mask) against the typical ones (at most the
median), cause by cause in the ledger, kernel count by kernel count and op by op in the torch pass.

The first measured step is left out: it runs as the collector starts (torch.profiler's first step, the
nsys capture range opening). Of the 9 committed captures whose steps varied by 10% or more, 7 did so
through that step alone (compiled_train_mlp: 9.35 ms against a 6.8 ms median; the 19 steps after it
vary by 8%)."""

from __future__ import annotations

from pathlib import PurePosixPath

import numpy as np
import pandas as pd

from hybrid.analysis.op_ranges import top_level_ops
from hybrid.analysis.steps import (
    OUTLIER_STEP_FACTOR,
    RECURRING_OUTLIERS,
    frame_source,
    in_steps,
    steady_mask,
)
from hybrid.ledger import Ledger
from hybrid.ledger.causes import LABELS
from hybrid.numbers import NS_PER_MS
from hybrid.profile import Profile
from hybrid.provenance import Metric
from nsight.intervals import step_of
from nsight.python_frames import library_site

# A step 10% over the median is slow: steady loops vary by a few % (data_pipeline.STEP_CV_PCT).
SLOW_STEP_FACTOR = 1.1
# An op or cause named as where the slow steps' extra time went holds at least this share of it.
NAMED_SHARE = 0.1
# Slow steps at one regular stride, this many at least, are periodic work in the loop.
PERIODIC_MIN = 3


def later_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The steady steps after the first one measured."""
    return steps.sort_values("start_ns").iloc[1:]


def later_step_metrics(steps: pd.DataFrame, src: str) -> dict[str, Metric]:
    """How much the steps after the first vary, and what their slow steps cost over the median."""
    later = later_steps(steps)
    if len(later) < 2:
        return {}
    ms = later["dur_ns"].to_numpy() / NS_PER_MS
    mean = float(ms.mean())
    return {
        "later_steps_cv_pct": Metric(100 * float(ms.std(ddof=0)) / mean if mean else 0.0, "%", src),
        "later_steps_mean_over_median_ms": Metric(max(0.0, mean - float(np.median(ms))), "ms", src),
    }


def _split(steps: pd.DataFrame) -> tuple[pd.Series, pd.Index, pd.Index, float]:
    """The later steps' durations (ms, by step), the slow and the typical ones, and what a slow step
    takes over a typical one (ms). Where outliers recur, the slow steps are those stalls: steps 10% over
    a sub-millisecond median are noise beside them and hid their stride (gc_every_fourth_step on the
    CPU: 9 slow steps, the 5 collections among them)."""
    dur = later_steps(steps).set_index("step")["dur_ns"] / NS_PER_MS
    median = float(dur.median())
    stalls = _largest_stalls(dur[dur > OUTLIER_STEP_FACTOR * median])
    slow = stalls if len(stalls) >= RECURRING_OUTLIERS else dur.index[dur > SLOW_STEP_FACTOR * median]
    typical = dur.index[dur <= median]
    return dur, slow, typical, float(dur.reindex(slow).mean() - dur.reindex(typical).mean())


def _largest_stalls(stalls: pd.Series) -> pd.Index:
    """The stalls above the widest gap in their durations where that gap is itself an outlier's
    factor and RECURRING_OUTLIERS or more stay above it: a noisy box adds stalls at another scale. On
    CI's 2 cores a step 7 over 3x the sub-millisecond median joined the 150-190 ms collections of
    gc_every_fourth_step at steps 4, 8, 12 and 16, and the slow steps lost their stride."""
    ms = stalls.sort_values()
    if len(ms) <= RECURRING_OUTLIERS:
        return ms.index
    ratios = ms.to_numpy()[1:] / ms.to_numpy()[:-1]
    widest = int(np.argmax(ratios[: len(ms) - RECURRING_OUTLIERS]))
    if ratios[widest] < OUTLIER_STEP_FACTOR:
        return ms.index
    return ms.index[widest + 1 :]


def _where(slow: pd.Index, later: pd.Index) -> str:
    """', one every N steps: steps 3, 7, ...' or ': steps 3-4, 9': the slow steps by number, runs of
    consecutive ones as ranges, the stride where it is one."""
    positions = np.flatnonzero(later.isin(slow))
    runs = np.split(positions, np.flatnonzero(np.diff(positions) > 1) + 1)
    parts = [f"{later[r[0]]}" if len(r) == 1 else f"{later[r[0]]}-{later[r[-1]]}" for r in runs]
    text = (
        "step"
        + ("s " if len(positions) > 1 else " ")
        + ", ".join(parts[:8])
        + (", ..." if len(parts) > 8 else "")
    )
    strides = np.unique(np.diff(positions))
    if len(positions) >= PERIODIC_MIN and len(strides) == 1 and strides[0] > 1:
        # The stride first: a list cut to one line keeps it.
        return f", one every {strides[0]} steps: {text}"
    return f": {text}"


def _extra_per(values: pd.DataFrame, slow: pd.Index, typical: pd.Index) -> pd.Series:
    """Per column, the slow steps' mean minus the typical steps' (a step without a row counts 0)."""
    slow_mean = values.reindex(slow, fill_value=0).mean()
    return (slow_mean - values.reindex(typical, fill_value=0).mean()).sort_values(ascending=False)


def _grown(extra: pd.Series, total_ms: float) -> pd.Series:
    """The (at most 3) entries of `extra` (most first) that hold NAMED_SHARE of `total_ms` or more."""
    return extra[extra >= NAMED_SHARE * total_ms].head(3)


def _named(extra: pd.Series, total_ms: float, label: dict[str, str] | None = None) -> str:
    """'name (+1.2 ms), ...' for the _grown entries of `extra`."""
    named = _grown(extra, total_ms)
    return ", ".join(f"{(label or {}).get(str(k), k)} (+{v:.2g} ms)" for k, v in named.items())


def slow_step_metrics(
    steps: pd.DataFrame, ledger: Ledger | None, profile: Profile, src: str, ops_src: str
) -> dict[str, Metric]:
    """Where the slow steps' extra time goes: the ledger cause that grows most (its key for the rules,
    its label for the reader; with a device timeline only), the kernels a slow and a typical step
    launch, the top-level ops whose host time grows (with a torch pass)."""
    dur, slow, typical, extra_ms = _split(steps)
    if slow.empty or typical.empty:
        return {}
    out = {
        "slow_steps": Metric(f"{len(slow)} of {len(dur)}" + _where(slow, dur.index), "", src),
        "slow_step_extra_ms": Metric(extra_ms, "ms", src),
    }
    if ledger is not None:
        seg = ledger.segments
        seg_ms = ((seg["end_ns"] - seg["start_ns"]) / NS_PER_MS).groupby(
            [seg["step"], seg["cause"]], observed=True
        )
        by_cause = _extra_per(seg_ms.sum().unstack(fill_value=0.0), slow, typical)
        kernels = in_steps(profile.kernels, steps).groupby("step").size()
        out |= {
            "slow_step_extra_cause": Metric(str(by_cause.index[0]), "", src),
            "slow_step_extra_causes": Metric(_named(by_cause, extra_ms, LABELS), "", src),
            "slow_step_kernels": Metric(float(kernels.reindex(slow, fill_value=0).mean()), "kernels", src),
            "typical_step_kernels": Metric(
                float(kernels.reindex(typical, fill_value=0).mean()), "kernels", src
            ),
        }
        # Each named cause's extra ms: where other findings claim those causes, the variation is theirs
        # (hybrid.rules.data_pipeline.jitter_is_theirs).
        out |= {
            f"slow_step_extra_{cause}_ms": Metric(float(ms), "ms", src)
            for cause, ms in _grown(by_cause, extra_ms).items()
        }
    out.update(_slow_step_ops(profile, steps, ops_src))
    out.update(_slow_step_lines(profile, steps, slow, typical, extra_ms))
    return out


def _slow_step_lines(
    profile: Profile, steps: pd.DataFrame, slow: pd.Index, typical: pd.Index, extra_ms: float
) -> dict[str, Metric]:
    """The script's lines whose sampled host time grows on the slow steps, each with the library code it went
    through: 'sentence_transformers_encode.py:23 through transformers/tokenization_utils_base.py:90 flatten
    (+0.84 ms)'. The Python samples of the thread that ran the user's code, on the analyzed timeline's
    clock (nsys's samples and steps); nothing without samples."""
    samples = profile.samples
    user = samples[samples["file"].notna()]
    if user.empty:
        return {}
    main = samples[samples["tid"] == user["tid"].value_counts().idxmax()]
    step = step_of(main["start_ns"].to_numpy(np.int64), steps["start_ns"], steps["end_ns"], steps["step"])
    main, step = main[step >= 0], step[step >= 0]
    if main.empty:
        return {}
    lines = [
        "no line of the script"
        if file is None or (isinstance(file, float) and np.isnan(file))
        else f"{PurePosixPath(str(file)).name}:{line}"
        + (f" through {library_site(str(lib), int(lib_line), lib_fn)}" if isinstance(lib, str) else "")
        for file, line, lib, lib_line, lib_fn in zip(
            main["file"],
            main["line"],
            main["library_file"],
            main["library_line"],
            main["library_function"],
            strict=True,
        )
    ]
    sampled_ms = ((main["end_ns"] - main["start_ns"]) / NS_PER_MS).to_numpy()
    by_step = pd.Series(sampled_ms).groupby([step, lines]).sum()
    extra = _extra_per(by_step.unstack(fill_value=0.0), slow, typical)
    named = _named(extra, extra_ms)
    if not named:
        return {}
    src = frame_source(profile, "samples")
    # The line that grows most, apart: the advice names it without reading it back out of the list's text.
    return {
        "slow_step_extra_lines": Metric(named, "", src),
        "slow_step_extra_line": Metric(str(extra.index[0]), "", src),
    }


def _slow_step_ops(profile: Profile, steps: pd.DataFrame, ops_src: str) -> dict[str, Metric]:
    """The top-level ops whose host time grows on slow steps, the slow steps of the ops' own pass: where
    the analyzed timeline is nsys's, the ops were timed in the torch pass's process, whose slow steps are
    others (pipeline.merge keeps that pass's steps as ops_clock_steps)."""
    own = profile.ops_clock_steps
    if own is not None and not own.empty:
        own = own.assign(dur_ns=own["end_ns"] - own["start_ns"])
        steps = own[steady_mask(own["dur_ns"].to_numpy())]
    ops = in_steps(top_level_ops(profile.ops), steps)
    _dur, slow, typical, extra_ms = _split(steps)
    if ops.empty or slow.empty or typical.empty:
        return {}
    host_ms = ((ops["end_ns"] - ops["start_ns"]) / NS_PER_MS).groupby([ops["step"], ops["name"]]).sum()
    extra = _extra_per(host_ms.unstack(fill_value=0.0), slow, typical)
    named = _named(extra, extra_ms)
    out = {"slow_step_extra_ops": Metric(named or "none", "", ops_src)}
    if named:
        new_shapes = _new_shapes(ops[ops["name"].isin(_grown(extra, extra_ms).index)], slow, typical)
        if new_shapes is not None:
            out["slow_step_new_shapes"] = Metric(new_shapes, "", ops_src)
    return out


def _new_shapes(ops: pd.DataFrame, slow: pd.Index, typical: pd.Index) -> str | None:
    """Whether the ops whose host time grows ran inputs of other shapes on the slow steps: 'aten::linear
    [[2048, 512], ...] (typical: [[256, 512], ...]), ...' for those whose slow-step shapes no typical step
    ran, or no earlier step (a size met for the first time, which the typical steps after it reuse: cuDNN
    plans a new sequence length once; the BERT loop padded to multiples of 8 ran three lengths, each also on
    typical steps, and its two slow steps were read as a slower host, benchmarks/results/s25_h100); 'none'
    where each slow-step call of those that took tensors had shapes an earlier typical step also ran (the
    same work took longer: the host was slower then); None where none of them took tensors whose shapes
    the trace keeps. An op sized by numbers (aten::randn) or given a tensor list (aten::stack) records no
    shapes to compare; the ops fed its output show them."""
    signature = ops["shapes"].map(repr)
    parts, compared = [], False
    for name, calls in ops.groupby("name", sort=False):
        if not any(isinstance(d, list) and d for s in calls["shapes"] if isinstance(s, list) for d in s):
            continue
        compared = True
        ordered = calls.sort_values("start_ns")
        first_step = ordered["step"].groupby(signature[ordered.index]).first()  # where each shape first ran
        on_slow = set(signature[calls.index[calls["step"].isin(slow)]])
        on_typical = set(signature[calls.index[calls["step"].isin(typical)]])
        new = sorted(shape for shape in on_slow if shape not in on_typical or first_step[shape] in slow)
        if new:
            seen = f" (typical: {min(on_typical)})" if on_typical else ""
            parts.append(f"{name} {new[0]}{seen}" + (f" and {len(new) - 1} more" if len(new) > 1 else ""))
    if parts:
        return ", ".join(parts)
    return "none" if compared else None
