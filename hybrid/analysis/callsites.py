"""Point each finding at the user's code: the lines of the script that the host ran, or sat blocked
in, during the time the finding is made of.

A finding is made of the ledger segments of the causes it drew on (Finding.claimed): where the host
explains them, its idle time and copies. Each segment has a weight (the time the finding claimed of it)
and an owner interval, the host time that explains it: the segment itself, except for a segment that
names a sync (the host blocked in it, or worked after it drained the queue), which the sync explains.
The Python samples of the host thread
during the owner interval split the segment's weight between the lines they show (each sample's first
frame in the user's files), so a line's share is the share of the finding's time spent there. Samples
come from the nsys pass's Python sampling; operators the torch pass recorded with Python stacks
(Profile.op_callsites) place the findings whose rule names operators (Rule.callsite_ops). A finding
that draws on compiled regions split by graph breaks is placed at the lines dynamo recorded for them.

A stage of the diagnosis (hybrid.pipeline.stages): it reads the Profile and the rules' findings, and
sets each one's `callsites`.
"""

from __future__ import annotations

import linecache
import os
import re
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd

from hybrid.analysis.diagnosis import Analyzed, Diagnosis
from hybrid.analysis.metrics import steady_steps
from hybrid.hardware import peaks_for
from hybrid.ledger import Ledger, build_ledger
from hybrid.ledger.causes import IDLE, STATE
from hybrid.profile import Profile
from hybrid.rules.base import CopyFilter, Finding
from hybrid.rules.registry import RULE_BY_ID
from nsight.python_frames import is_user_file

NO_SAMPLES_NOTE = "no callsites: the capture has no Python samples"
NO_STACKS_NOTE = "no callsites: the export left out the stacks of its Python samples"
TOP_CALLSITES = 3

# Dynamo writes a graph break's user frame as traceback text: File "train.py", line 42, in forward
TRACEBACK_FRAME = re.compile(r'File "([^"]+)", line (\d+)(?:, in (\S+))?')


def _steady_window(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    steps = steady_steps(profile)
    return steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)


def _inside(frame: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> pd.DataFrame:
    """Rows of `frame` that start inside one of the windows [starts, ends)."""
    if frame.empty or len(starts) == 0:
        return frame.iloc[:0]
    t = frame["start_ns"].to_numpy(np.int64)
    slot = np.searchsorted(starts, t, side="right") - 1
    keep = (slot >= 0) & (t < ends[np.clip(slot, 0, None)])
    return frame[keep]


Segments = tuple[np.ndarray, np.ndarray, np.ndarray]  # owner start, owner end, weight (ns)


def _claimed_segments(
    finding: Finding, ledger: Ledger, profile: Profile, copies: CopyFilter | None
) -> Segments:
    """The ledger segments of the causes the finding drew on, where the host explains them (idle time and
    copies, not kernel time), each weighted by its duration: the engine draws a share of a cause, not
    chosen segments of it, so every segment of the cause is the finding's in part. (Weighting them by
    that share moved the top line of sync_item_per_microstep's host-work finding off its planted sync,
    whose host work after the sync the sync finding drew first.) A segment that names a sync (host
    blocked in it, or host work after it drained the queue) is owned by that sync's host interval; copies
    are narrowed to those the finding is about (pageable or pinned, by direction)."""
    causes = [
        cause for cause, ms in finding.claimed.items() if ms > 0 and (STATE[cause] == IDLE or cause == "copy")
    ]
    segments = ledger.segments[ledger.segments["cause"].isin(causes)]
    frame, row = segments["ref_frame"].astype(object), segments["ref_row"].to_numpy(np.int64)
    if copies is not None:
        memcpys = profile.memcpys.reset_index(drop=True)
        is_copy = (frame == "memcpys").to_numpy(bool)
        keep = ~is_copy
        rows = row[is_copy]
        kinds = memcpys["kind"].astype(str).to_numpy(object)[rows]
        pinned = memcpys["host_pinned"].to_numpy(object)[rows]
        keep[is_copy] = np.isin(kinds, copies.kinds) & (
            True if copies.pinned is None else np.array([p is copies.pinned for p in pinned], bool)
        )
        segments, frame, row = segments[keep], frame[keep], row[keep]
    a, b = segments["start_ns"].to_numpy(np.int64), segments["end_ns"].to_numpy(np.int64)
    weight = b - a
    owner_a, owner_b = a.copy(), b.copy()
    in_sync = (frame == "syncs").to_numpy(bool)
    if in_sync.any():
        syncs = profile.syncs.reset_index(drop=True)
        owner_a[in_sync] = syncs["start_ns"].to_numpy(np.int64)[row[in_sync]]
        owner_b[in_sync] = syncs["end_ns"].to_numpy(np.int64)[row[in_sync]]
    return owner_a, owner_b, weight


class _Samples:
    """The steady steps' samples of each thread, in time order, with frame codes."""

    def __init__(self, profile: Profile) -> None:
        samples = _inside(profile.samples, *_steady_window(profile))
        self.frames = samples.sort_values(["tid", "start_ns"], kind="stable").reset_index(drop=True)
        keys = self.frames["file"].astype(object).where(self.frames["file"].notna(), None)
        codes, self.keys = pd.factorize(
            pd.Series(list(zip(keys, self.frames["line"], strict=False))), use_na_sentinel=True
        )
        self.code = np.where(keys.isna().to_numpy(), -1, codes)
        launch_tids = set(profile.launches["tid"].unique().tolist())
        self.tids = self.frames["tid"].unique().tolist()
        self.launching = [t for t in self.tids if t in launch_tids]

    def _thread(self, tid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = np.flatnonzero(self.frames["tid"].to_numpy() == tid)
        return (
            self.frames["start_ns"].to_numpy(np.int64)[rows],
            self.frames["end_ns"].to_numpy(np.int64)[rows],
            self.code[rows],
        )

    def weights(self, segments: Segments) -> tuple[np.ndarray, int]:
        """Weight (ns) of each frame code over `segments` on the host thread that ran user code in
        them (a thread that launched GPU work first), and the total weight of the segments."""
        a, b, w = segments
        total = int(w.sum())
        best = np.zeros(len(self.keys))
        best_user = 0.0
        for tid in self.launching or self.tids:
            by_code = self._split(a, b, w, *self._thread(tid))
            user = by_code.sum()
            if user > best_user:
                best, best_user = by_code, user
        return best, total

    def _split(
        self, a: np.ndarray, b: np.ndarray, w: np.ndarray, s: np.ndarray, e: np.ndarray, code: np.ndarray
    ) -> np.ndarray:
        """Each segment's weight, split between the frames sampled in its owner interval in
        proportion to the sampled time (sample spans of one thread are disjoint and sorted)."""
        out = np.zeros(len(self.keys))
        if len(s) == 0 or len(a) == 0:
            return out
        lo = np.searchsorted(e, a, side="right")
        hi = np.searchsorted(s, b, side="left")
        counts = np.clip(hi - lo, 0, None)
        if counts.sum() == 0:
            return out
        segment = np.repeat(np.arange(len(a)), counts)
        offsets = np.cumsum(counts) - counts
        sample = lo[segment] + (np.arange(counts.sum()) - offsets[segment])
        overlap = np.clip(np.minimum(b[segment], e[sample]) - np.maximum(a[segment], s[sample]), 0, None)
        sampled = np.bincount(segment, weights=overlap, minlength=len(a))
        share = np.divide(overlap, sampled[segment], out=np.zeros(len(overlap)), where=sampled[segment] > 0)
        user = code[sample] >= 0
        np.add.at(out, code[sample][user], (w[segment] * share)[user])
        return out

    def function(self, code: int) -> str | None:
        file, line = self.keys[code]
        rows = self.frames[(self.frames["file"] == file) & (self.frames["line"] == line)]
        return None if rows.empty else rows["function"].iloc[0]


class _Paths:
    """Shows a recorded path relative to the script's folder and finds its source text here.

    The recorded folder is where the profiled machine had the script: the sampled file whose path
    ends with the script path the run was given (the interpreter records the script's path as given,
    modules it imports by their full path). The source is read from the recorded path, or, when the
    run was recorded elsewhere, from the same relative path under the script's folder here."""

    def __init__(self, script: str | None, recorded: list[str], *, module: bool = False) -> None:
        self.recorded_dir: PurePosixPath | None = None
        self.local_dir: Path | None = None
        if not script:
            return
        given = PurePosixPath(os.path.normpath(script).replace(os.sep, "/"))
        matches = [
            PurePosixPath(path)
            for path in recorded
            if path == str(given) or path.endswith("/" + str(given).lstrip("/"))
        ]
        absolute = [m for m in matches if m.is_absolute()]
        # A script's paths are shown from its folder; a module's (`-m pkg.mod`, given as pkg/mod.py) from
        # the folder its package sits in, so they read pkg/mod.py:42.
        up = len(given.parts) if module else 1
        if absolute or matches:
            self.recorded_dir = (absolute or matches)[0].parents[up - 1]
        elif given.is_absolute():
            self.recorded_dir = given.parents[up - 1]
        self.local_dir = Path.cwd() if module else Path(script).resolve().parent

    def shown(self, path: str) -> str:
        folder = self.recorded_dir
        if folder is None:
            return path
        pure = PurePosixPath(path)
        if pure.is_absolute() == folder.is_absolute():
            if str(folder) == ".":
                return path
            try:
                return str(pure.relative_to(folder))
            except ValueError:
                return path
        if pure.is_absolute():  # the script given relative to the run's folder, an import by full path
            marker = f"/{folder}/"
            return path.rsplit(marker, 1)[1] if marker in path else path
        return path

    def source_line(self, path: str, line: int) -> str | None:
        candidates = [Path(path)] if PurePosixPath(path).is_absolute() else []
        if self.local_dir is not None and (self.shown(path) != path or not candidates):
            candidates.append(self.local_dir / self.shown(path))
        for candidate in candidates:
            text = linecache.getline(str(candidate), line) if candidate.is_file() else ""
            if text.strip():
                return text.strip()
        return None

    def callsite(self, path: str, line: int, function: str | None, share_pct: float) -> dict:
        return {
            "file": self.shown(path),
            "line": int(line),
            "function": function,
            "share_pct": round(float(share_pct), 1),
            "source_line": self.source_line(path, int(line)),
            "path": path,
        }


def _ranked(weights: np.ndarray, total: int, samples: _Samples, paths: _Paths) -> list[dict]:
    if total <= 0 or not weights.any():
        return []
    top = [int(c) for c in np.argsort(-weights, kind="stable")[:TOP_CALLSITES] if weights[c] > 0]
    return [
        paths.callsite(samples.keys[c][0], samples.keys[c][1], samples.function(c), 100 * weights[c] / total)
        for c in top
    ]


def _op_callsites(profile: Profile, ops: set[str], paths: _Paths) -> list[dict]:
    calls = profile.op_callsites
    calls = calls[calls["op"].isin(ops)]
    total = int(calls["ns"].sum())
    if total <= 0:
        return []
    placed = calls[calls["file"].notna()]
    lines = (
        placed.groupby(["file", "line"], sort=False)
        .agg(ns=("ns", "sum"), function=("function", "first"))
        .sort_values("ns", ascending=False)
    )
    return [
        paths.callsite(file, line, row["function"], 100 * row["ns"] / total)
        for (file, line), row in lines.head(TOP_CALLSITES).iterrows()
    ]


def _graph_break_callsites(profile: Profile, paths: _Paths) -> list[dict]:
    """Each torch.compile graph break at the user line dynamo recorded for it (the injector keeps it
    beside the reason), or the innermost user frame of a traceback in the reason text; shares are
    of the breaks counted."""
    breaks = profile.extras.get("graph_breaks")
    if not isinstance(breaks, list) or not breaks:
        return []
    counts: dict[tuple[str, int], list] = {}
    total = 0
    for entry in breaks:
        entry = entry if isinstance(entry, dict) else {"reason": str(entry)}
        count = int(entry.get("count") or 1)
        total += count
        site = (
            (entry["file"], int(entry["line"]), entry.get("function"))
            if entry.get("file") and entry.get("line")
            else next(
                (
                    (f, int(n), fn or None)
                    for f, n, fn in reversed(TRACEBACK_FRAME.findall(entry.get("reason", "")))
                    if is_user_file(f)
                ),
                None,
            )
        )
        if site is not None and is_user_file(site[0]):
            counts.setdefault(site[:2], [site[2], 0])[1] += count
    ranked = sorted(counts.items(), key=lambda item: -item[1][1])[:TOP_CALLSITES]
    return [
        paths.callsite(file, line, function, 100 * count / total)
        for (file, line), (function, count) in ranked
    ]


def attach_callsites(diagnosis: Diagnosis, analyzed: Analyzed) -> None:
    """Give every finding `callsites`: the top user lines, [] when none applies. The analyzed profile
    comes first, then others of the same run that may carry Python stacks on their own clock (the torch
    pass's); the first with samples places the findings' segments, on its own timeline. The script is the
    profiled script's path as the run was given it (None for a foreign export): paths are shown relative
    to its folder; for a module, the module's file relative to its package's folder (hybrid/models.py),
    paths relative to that folder. Without Python samples, the limitations say so."""
    profiles = [analyzed.profile, *analyzed.stack_profiles]
    script, module = analyzed.script, analyzed.script_is_module
    sampled = next((p for p in profiles if not p.samples.empty), profiles[0])
    stacked = next((p for p in profiles if not p.op_callsites.empty), profiles[0])
    samples = _Samples(sampled)
    breaks = profiles[0].extras.get("graph_breaks")
    recorded = [
        *samples.frames["file"].dropna().unique().tolist(),
        *stacked.op_callsites["file"].dropna().unique(),
        *(
            b["file"]
            for b in (breaks if isinstance(breaks, list) else [])
            if isinstance(b, dict) and b.get("file")
        ),
    ]
    paths = _Paths(script, recorded, module=module)
    # The samples lie on the sampled profile's clock: its own ledger places them (the torch pass's, when
    # only it was sampled).
    ledger = analyzed.ledger if sampled is analyzed.profile else None
    if ledger is None and not samples.frames.empty:
        ledger = build_ledger(sampled, peaks_for(sampled.device))
    for finding in diagnosis.findings:
        if "compiled_region_break" in finding.pool:
            finding.callsites = _graph_break_callsites(profiles[0], paths)
        else:
            finding.callsites = _for_finding(finding, sampled, ledger, stacked, samples, paths)
        if finding.callsites:
            _drop_locating_advice(finding)
    if sampled.samples.empty and stacked.op_callsites.empty:
        diagnosis.limitations.append(_missing_note(profiles))


def _drop_locating_advice(finding: Finding) -> None:
    """A finding whose callsites name the lines needs no advice on how to find them (py-spy...)."""
    advice, suggestions = finding.advice, finding.suggestions
    if len(advice) != len(suggestions) or not any(a.get("locates_code") for a in advice):
        return
    kept = [i for i, a in enumerate(advice) if not a.get("locates_code")]
    finding.advice = [advice[i] for i in kept]
    finding.suggestions = [suggestions[i] for i in kept]


def _missing_note(profiles: list[Profile]) -> str:
    stackless = max(
        (p.extras.get("nsys", {}).get("python_samples_without_stack") or 0 for p in profiles), default=0
    )
    if stackless:
        return (
            f"{NO_STACKS_NOTE} ({stackless} samples; `nsys profile --export sqlite` drops NVTX payloads): "
            "export the report again with `nsys export --type sqlite --include-blobs=true REPORT.nsys-rep`."
        )
    if not any(p.extras.get("nsys") for p in profiles):
        # No nsys capture (torch-only run, no GPU): sampling is not possible, operator stacks are.
        return (
            f"{NO_SAMPLES_NOTE} (no Nsight Systems capture to sample): findings do not name the script's "
            "lines; `hybrid run --torch-stacks` records operators' Python stacks in the torch pass instead."
        )
    return (
        f"{NO_SAMPLES_NOTE} (nsys ran without --python-sampling, or has no such option): findings do not "
        "name the script's lines; rerun with `hybrid run --callsites python`."
    )


def _evidence_ops(finding: Finding) -> set[str]:
    """Operator names the finding's evidence lists ('aten::to, aten::copy_')."""
    return {
        name.strip()
        for item in finding.evidence
        if isinstance(item.value, str)
        for name in item.value.split(",")
        if "::" in name
    }


def _for_finding(
    finding: Finding,
    profile: Profile,
    ledger: Ledger | None,
    stacked: Profile,
    samples: _Samples,
    paths: _Paths,
) -> list[dict]:
    rule = RULE_BY_ID.get(finding.id)
    if rule is not None and rule.callsite_ops is not None:
        placed = _op_callsites(stacked, _evidence_ops(finding) or set(rule.callsite_ops), paths)
        if placed:
            return placed
    if ledger is None or samples.frames.empty or not finding.claimed:
        return []
    owners = _claimed_segments(finding, ledger, profile, rule.copies if rule is not None else None)
    window = _steady_window(profile)
    inside = _inside(pd.DataFrame({"start_ns": owners[0], "end_ns": owners[1], "w": owners[2]}), *window)
    weights, total = samples.weights(
        (
            inside["start_ns"].to_numpy(np.int64),
            inside["end_ns"].to_numpy(np.int64),
            inside["w"].to_numpy(np.int64),
        )
    )
    return _ranked(weights, total, samples, paths)
