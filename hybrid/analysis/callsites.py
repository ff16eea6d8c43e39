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

Kernel time (a GPU finding's busy causes) is placed where the host launched it: each of the finding's
kernels takes the user line of the sample nearest its launch on the launching thread, or, for a
thread without Python frames (autograd's backward thread), on the thread that ran the user's code then
(sitting in `loss.backward()`). Where the samples lie on another pass's clock (the torch pass's, with
--torch-stacks), the finding's kernels are matched to that pass's kernels by name and order within the
step. The NVTX module range open at the launch (--nvtx-modules) names the module beside the line. A
finding no line can be given says why (`callsite_reason`).

A stage of the diagnosis (hybrid.pipeline.stages): it reads the Profile and the rules' findings, and
sets each one's `callsites`.
"""

from __future__ import annotations

import linecache
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd

from hybrid.analysis.diagnosis import Analyzed, Diagnosis
from hybrid.analysis.metrics import explicit_collect_sites
from hybrid.analysis.steps import steady_steps
from hybrid.hardware import peaks_for
from hybrid.ledger import Ledger, build_ledger
from hybrid.ledger.causes import BUSY, IDLE, STATE
from hybrid.profile import Profile
from hybrid.rules.advice import GC_COLLECT_CALL
from hybrid.rules.base import CopyFilter, Finding, Rule
from hybrid.rules.registry import RULE_BY_ID
from nsight.ncu import function_base_name
from nsight.python_frames import is_user_file, library_site

NO_SAMPLES_NOTE = "no callsites: the capture has no Python samples"
NO_STACKS_NOTE = "no callsites: the export left out the stacks of its Python samples"
TOP_CALLSITES = 3
# A module named for a finding holds at least this share of it; a finding spread thinner is named by the
# enclosing modules.
MODULE_SHARE_PCT = 20.0
# Why a finding has no callsite, where no capture setting would give it one.
NOT_MEASURED_REASON = "no callsite: a note on counters this run did not measure, not time found in its steps"
# An alternative's time is its owners' (the same time by another remedy, or by the same fix as theirs).
ALTERNATIVE_REASON = (
    "no callsite: its time is that of the findings it is an alternative to; their callsites place it"
)
NO_CLAIM_REASON = (
    "no callsite: the finding claims no time of the step's ledger (its figure is not made of kernels, "
    "copies or host intervals), so no launch or host interval places it"
)
NO_BREAK_LINES = "no callsite: dynamo recorded no line of the user's files for its graph breaks"
UNMATCHED_REASON = (
    "no callsite: none of its kernels matched a kernel of the torch pass, whose stacks place the launches "
    "(by function name and order within the step)"
)
NO_USER_FRAME_REASON = (
    "no callsite: the Python samples at its kernels' launches and during its host time show no line of "
    "the user's files (the time is spent under library code or on threads without Python frames)"
)

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


def _claimed_kernels(finding: Finding, ledger: Ledger, profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """Rows of profile.kernels the finding drew on (the kernel segments of its busy causes) and the ns of
    each. A rule with a kernel filter is about some kernels of a shared pool (the fusion finding's
    elementwise chains): the filtered kernels of every cause of its pool, since the share it drew is no
    choice of kernels (on resnet50-default it drew 0.89 ms of kernel_no_shortfall, all cuDNN layout and
    norm kernels, while its chains ran in below_roofline)."""
    rule = RULE_BY_ID.get(finding.id)
    narrowed = rule is not None and rule.callsite_kernels is not None
    causes = [
        cause
        for cause in dict.fromkeys([*finding.claimed, *(finding.pool if narrowed else [])])
        if STATE.get(cause) == BUSY and (narrowed or finding.claimed.get(cause, 0) > 0)
    ]
    segments = ledger.segments
    segments = segments[segments["cause"].isin(causes) & (segments["ref_frame"] == "kernels")]
    rows = segments["ref_row"].to_numpy(np.int64)
    ns = (segments["end_ns"] - segments["start_ns"]).to_numpy(np.int64)
    if rule is not None and rule.callsite_kernels is not None and len(rows):
        names = profile.kernels["name"].reset_index(drop=True).iloc[rows].reset_index(drop=True)
        keep = rule.callsite_kernels(names)
        rows, ns = rows[keep], ns[keep]
    unique, inverse = np.unique(rows, return_inverse=True)
    return unique, np.bincount(inverse, weights=ns, minlength=len(unique)).astype(np.int64)


def _launch_order(profile: Profile) -> pd.DataFrame:
    """Each steady-step kernel's (key, ordinal): its function's base name, what the torch and nsys passes'
    demanglers agree on (they differ in casts, lambdas and parameter lists: 'T2 *' vs 'float*'), and how
    many kernels of that name ran before it in its step. A step launches the same kernels in the same order
    in every pass: on the 24 committed runs with both passes, 64,440 of 64,455 nsys kernels find theirs, and
    99.94% of the pairs share grid and block."""
    kernels = profile.kernels.reset_index(drop=True)
    steady = kernels["step"].isin(steady_steps(profile)["step"])
    kernels = kernels[steady].sort_values("start_ns", kind="stable")
    codes, names = pd.factorize(kernels["name"])
    keys = np.array([function_base_name(str(name)) for name in names], dtype=object)[codes]
    frame = pd.DataFrame(
        {"row": kernels.index.to_numpy(np.int64), "step": kernels["step"].to_numpy(), "key": keys}
    )
    frame["ordinal"] = frame.groupby(["step", "key"], sort=False).cumcount()
    return frame


def _matched_rows(
    rows: np.ndarray, ns: np.ndarray, analyzed: Profile, sampled: Profile
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(analyzed row, sampled row, ns) pairs: the sampled pass's kernels that are the analyzed profile's
    `rows` (same key and ordinal in a steady step), each with an even part of its analyzed row's ns (one
    analyzed kernel matches one kernel per sampled step)."""
    if sampled is analyzed:
        return rows, rows, ns.astype(np.float64)
    # A kernel launched in a step left out as an outlier may run into a steady one: it has no ordinal.
    mine = _launch_order(analyzed).set_index("row").reindex(rows)[["key", "ordinal"]]
    mine["ns"] = ns
    mine = mine.dropna(subset=["key"]).astype({"ordinal": np.int64})
    theirs = _launch_order(sampled)[["row", "key", "ordinal"]]
    joined = mine.reset_index(names="mine").merge(theirs, on=["key", "ordinal"])
    share = joined["ns"] / joined.groupby("mine")["row"].transform("size")
    return joined["mine"].to_numpy(np.int64), joined["row"].to_numpy(np.int64), share.to_numpy(np.float64)


def _launches_at(profile: Profile, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Thread and host time of each kernel row's launch call (thread -1 where the launch is unknown)."""
    kernels = profile.kernels.reset_index(drop=True).iloc[rows]
    launches = profile.launches.drop_duplicates("correlation").set_index("correlation")["tid"]
    tids = kernels["correlation"].map(launches).fillna(-1).to_numpy(np.int64, copy=True)
    times = kernels["launch_ns"].to_numpy(np.int64)
    tids[times < 0] = -1
    return tids, times


class _Samples:
    """The steady steps' samples of each thread, in time order, with frame codes: a code is a user line and
    the library frame it made its call through (nsight.python_frames.first_library_frame), so a line's
    time can also say which library code it went to; `line_of` maps each code to its user line
    (`lines`), `library` to its library site (None where the line made the call itself)."""

    def __init__(self, profile: Profile) -> None:
        samples = _inside(profile.samples, *_steady_window(profile))
        self.frames = samples.sort_values(["tid", "start_ns"], kind="stable").reset_index(drop=True)
        files = self.frames["file"].astype(object).where(self.frames["file"].notna(), None)
        library = self.frames["library_file"].astype(object).where(self.frames["library_file"].notna(), None)
        codes, self.keys = pd.factorize(
            pd.Series(
                list(zip(files, self.frames["line"], library, self.frames["library_line"], strict=False))
            ),
            use_na_sentinel=True,
        )
        self.code = np.where(files.isna().to_numpy(), -1, codes)
        line_codes, self.lines = pd.factorize(pd.Series([key[:2] for key in self.keys], dtype=object))
        self.line_of = np.asarray(line_codes, dtype=np.int64)
        first = pd.Series(np.arange(len(self.frames))).groupby(self.code).first()
        functions = self.frames["library_function"].to_numpy(object)
        self.library = [
            None
            if key[2] is None
            else library_site(str(key[2]), int(key[3]), functions[first[code]] if code in first else None)
            for code, key in enumerate(self.keys)
        ]
        launch_tids = set(profile.launches["tid"].unique().tolist())
        self.tids = self.frames["tid"].unique().tolist()
        self.launching = [t for t in self.tids if t in launch_tids]
        user = self.frames.loc[self.code >= 0, "tid"]
        # The thread that ran the user's code: where a launch from a thread without Python frames (autograd's
        # backward thread) finds its line.
        self.main_tid = int(user.value_counts().idxmax()) if len(user) else None

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

    def at(self, tids: np.ndarray, times: np.ndarray) -> np.ndarray:
        """The frame code of the sample covering each (thread, time), on that thread when it shows a user
        frame there, else on the main thread; -1 where neither does."""
        codes = self._covering(tids, times)
        if self.main_tid is not None:
            missing = codes < 0
            codes[missing] = self._covering(np.full(int(missing.sum()), self.main_tid), times[missing])
        return codes

    def _covering(self, tids: np.ndarray, times: np.ndarray) -> np.ndarray:
        """The code of the sample nearest each time on its thread, within the span of samples that covers
        it (a sample is what ran at its start: a launch late in a 1 ms span is nearer the next one)."""
        codes = np.full(len(times), -1, dtype=np.int64)
        for tid in np.unique(tids).tolist():
            if tid not in self.tids:
                continue
            which = np.flatnonzero(tids == tid)
            s, e, code = self._thread(tid)
            t = times[which]
            slot = np.searchsorted(s, t, side="right") - 1
            inside = (slot >= 0) & (t < e[np.clip(slot, 0, None)])
            after = np.clip(slot + 1, 0, len(s) - 1)
            held = np.clip(slot, 0, None)
            nearer = (slot + 1 < len(s)) & (s[after] == e[held]) & (s[after] - t < t - s[held])
            slot = np.where(nearer, after, slot)
            codes[which[inside]] = code[slot[inside]]
        return codes

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

    def function(self, line_index: int) -> str | None:
        file, line = self.lines[line_index]
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
        """The text of `line` in the Python file a frame named. The path comes from the profile, which may
        be a file someone sent: only a .py file is read, so no path in it can print a line of another file
        of this machine (a key, a config) into the report."""
        if PurePosixPath(path).suffix != ".py":
            return None
        candidates = [Path(path)] if PurePosixPath(path).is_absolute() else []
        if self.local_dir is not None and (self.shown(path) != path or not candidates):
            candidates.append(self.local_dir / self.shown(path))
        for candidate in candidates:
            text = linecache.getline(str(candidate), line) if candidate.is_file() else ""
            if text.strip():
                return text.strip()
        return None

    def callsite(
        self, path: str, line: int, function: str | None, share_pct: float, module: str | None = None
    ) -> dict:
        site = {
            "file": self.shown(path),
            "line": int(line),
            "function": function,
            "share_pct": round(float(share_pct), 1),
            "source_line": self.source_line(path, int(line)),
            "path": path,
        }
        if module is not None:  # the NVTX module range the kernels placed here were launched in
            site["module"] = module
        return site


def _ranked(
    weights: np.ndarray, total: float, samples: _Samples, paths: _Paths, modules: dict[int, str]
) -> list[dict]:
    """The user lines with the most of the finding's weight (per frame code), each with its share, the
    module most of its kernels ran in (`modules`, by line) and the library code its time went to
    (`inside`)."""
    if total <= 0 or not weights.any():
        return []
    by_line = np.bincount(samples.line_of, weights=weights, minlength=len(samples.lines))
    top = [int(i) for i in np.argsort(-by_line, kind="stable")[:TOP_CALLSITES] if by_line[i] > 0]
    placed = []
    for index in top:
        codes = np.flatnonzero((samples.line_of == index) & (weights > 0))
        codes = codes[np.argsort(-weights[codes], kind="stable")]
        site = paths.callsite(
            samples.lines[index][0],
            samples.lines[index][1],
            samples.function(index),
            100 * by_line[index] / total,
            modules.get(index),
        )
        inside = _inside_libraries(samples, codes, weights, total)
        if inside:
            site["inside"] = inside
        placed.append(site)
    return placed


def _inside_libraries(samples: _Samples, codes: np.ndarray, weights: np.ndarray, total: float) -> list[dict]:
    """The library sites a line's codes went to, top three by their share of the finding."""
    by_site: dict[str, float] = {}
    for code in codes.tolist():
        site = samples.library[code]
        if site is not None:
            by_site[site] = by_site.get(site, 0.0) + float(weights[code])
    ranked = sorted(by_site.items(), key=lambda item: -item[1])[:TOP_CALLSITES]
    return [{"site": site, "share_pct": round(100 * w / total, 1)} for site, w in ranked]


def _module_callsites(layers: np.ndarray, ns: np.ndarray, total: float) -> list[dict]:
    """The NVTX module ranges (--nvtx-modules) the finding's kernels were launched in, top three by time,
    where no Python line places them: the module path is the user's code at the granularity of a layer. Named
    at the deepest level of the module tree where one module holds MODULE_SHARE_PCT of the finding, else at
    the top level: resnet50's FP32 convolutions spread over 53 modules, none over 1.3% of them, so their
    stages (layer1..layer4) are named instead. Backward kernels run outside the forward's module ranges and
    stay unnamed (71% of that finding), so the shares add up to the forward's part."""
    named = pd.notna(layers)
    if total <= 0 or not named.any():
        return []
    paths = pd.Series(layers[named].astype(str))
    weights = pd.Series(ns[named])
    depth = int(paths.str.count(r"\.").max()) + 1
    for level in range(depth, 0, -1):
        by_module = weights.groupby(paths.map(lambda p, n=level: ".".join(p.split(".")[:n]))).sum()
        by_module = by_module.sort_values(ascending=False)
        if 100 * by_module.iloc[0] / total >= MODULE_SHARE_PCT:
            break
    return [
        {
            "file": None,
            "line": None,
            "function": None,
            "share_pct": round(float(100 * weight / total), 1),
            "source_line": None,
            "path": None,
            "module": str(name),
        }
        for name, weight in by_module.head(TOP_CALLSITES).items()
        if weight > 0
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


def _collect_callsites(finding: Finding, sites: list[dict], paths: _Paths) -> list[dict]:
    """Where a finding's advice is to move a gc.collect() call, that call, with its share of the time
    the explicit collections took; [] otherwise."""
    if not sites or not any(a.get("moves_call") == GC_COLLECT_CALL for a in finding.advice):
        return []
    total = sum(float(s["ms"]) for s in sites) or 1.0
    return [paths.callsite(s["file"], s["line"], None, 100 * float(s["ms"]) / total) for s in sites]


def attach_callsites(diagnosis: Diagnosis, analyzed: Analyzed) -> None:
    """Give every finding `callsites`: the top user lines, [] when none applies, and then its
    `callsite_reason`, why none. The analyzed profile comes first, then others of the same run that may
    carry Python stacks on their own clock (the torch pass's); the first with samples places the findings'
    segments and kernel launches, on its own timeline. The script is the profiled script's path as the run
    was given it (None for a foreign export): paths are shown relative to its folder; for a module, the
    module's file relative to its package's folder (hybrid/models.py), paths relative to that folder.
    Without Python samples, the limitations say so where a measured finding could not be placed."""
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
    collect_sites = explicit_collect_sites(profiles[0].extras)
    recorded += [site["file"] for site in collect_sites]
    paths = _Paths(script, recorded, module=module)
    # The samples lie on the sampled profile's clock: its own ledger places them (the torch pass's, when
    # only it was sampled).
    ledger = analyzed.ledger if sampled is analyzed.profile else None
    if ledger is None and not samples.frames.empty:
        ledger = build_ledger(sampled, peaks_for(sampled.device))
    missing = _missing_note(profiles) if sampled.samples.empty and stacked.op_callsites.empty else None
    placer = _Placer(analyzed.profile, analyzed.ledger, sampled, ledger, stacked, samples, paths, missing)
    for finding in diagnosis.findings:
        if "compiled_region_break" in finding.pool:
            finding.callsites = _graph_break_callsites(profiles[0], paths)
            reason = None if finding.callsites else NO_BREAK_LINES
        else:
            finding.callsites, reason = placer.place(finding)
        if not finding.callsites:
            finding.callsites = _collect_callsites(finding, collect_sites, paths)
            reason = None if finding.callsites else reason
        finding.callsite_reason = reason
        if finding.callsites:
            _drop_locating_advice(finding)
    # Said where a measured finding lacks its lines for it: a CPU resnet50 with none read it as a fifth note.
    # Module ranges place kernels without a line: the note stands unless every measured finding has one.
    if missing is not None and any(
        not f.not_measured and not any(site.get("line") for site in f.callsites or [])
        for f in diagnosis.findings
    ):
        diagnosis.limitations.append(missing)


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


@dataclass(frozen=True)
class _KernelPart:
    """A finding's kernel time by the samples at the launches: weight (ns) per frame code, the kernels' total
    ns, the module most of each user line's kernels ran in, each kernel's module and ns (None without
    kernels), and whether any matched a kernel of the sampled pass."""

    weights: np.ndarray
    total: float
    modules: dict[int, str]
    layers: tuple[np.ndarray, np.ndarray] | None
    matched: bool


class _Placer:
    """Places one finding at a time: the run's samples, stacks and ledgers, read once."""

    def __init__(
        self,
        analyzed: Profile,
        analyzed_ledger: Ledger | None,
        sampled: Profile,
        sampled_ledger: Ledger | None,
        stacked: Profile,
        samples: _Samples,
        paths: _Paths,
        missing: str | None,
    ) -> None:
        self.analyzed, self.analyzed_ledger = analyzed, analyzed_ledger
        self.sampled, self.sampled_ledger = sampled, sampled_ledger
        self.stacked, self.samples, self.paths, self.missing = stacked, samples, paths, missing
        # Without samples or module ranges no kernel can be placed: a bare 10M-kernel export skips the lookup.
        self.placeable = not samples.frames.empty or bool(analyzed.kernels["layer"].notna().any())

    def place(self, finding: Finding) -> tuple[list[dict], str | None]:
        """The finding's callsites, and why it has none (None when it has some)."""
        rule = RULE_BY_ID.get(finding.id)
        if rule is not None and rule.callsite_ops is not None:
            placed = _op_callsites(self.stacked, _evidence_ops(finding) or set(rule.callsite_ops), self.paths)
            if placed:
                return placed, None
        if finding.not_measured:
            return [], NOT_MEASURED_REASON
        if finding.alternative:
            return [], ALTERNATIVE_REASON
        if not any(ms > 0 for ms in finding.claimed.values()):
            return [], NO_CLAIM_REASON
        host, host_total = self._host_weights(finding, rule)
        kernels = self._kernel_weights(finding)
        total = host_total + kernels.total
        placed = _ranked(host + kernels.weights, total, self.samples, self.paths, kernels.modules)
        if not placed and kernels.layers is not None:
            placed = _module_callsites(*kernels.layers, total)
        if placed:
            return placed, None
        if self.missing is not None:
            return [], self.missing
        if kernels.total > 0 and self.sampled is not self.analyzed and not kernels.matched:
            return [], UNMATCHED_REASON
        return [], NO_USER_FRAME_REASON

    def _host_weights(self, finding: Finding, rule: Rule | None) -> tuple[np.ndarray, float]:
        """Weights per frame code of the finding's idle and copy segments, by the samples in their owners."""
        if self.sampled_ledger is None or self.samples.frames.empty:
            return np.zeros(len(self.samples.keys)), 0.0
        owners = _claimed_segments(
            finding, self.sampled_ledger, self.sampled, rule.copies if rule is not None else None
        )
        window = _steady_window(self.sampled)
        inside = _inside(pd.DataFrame({"start_ns": owners[0], "end_ns": owners[1], "w": owners[2]}), *window)
        weights, total = self.samples.weights(
            (
                inside["start_ns"].to_numpy(np.int64),
                inside["end_ns"].to_numpy(np.int64),
                inside["w"].to_numpy(np.int64),
            )
        )
        return weights, float(total)

    def _kernel_weights(self, finding: Finding) -> _KernelPart:
        weights = np.zeros(len(self.samples.keys))
        if self.analyzed_ledger is None or not self.placeable:
            return _KernelPart(weights, 0.0, {}, None, False)
        rows, ns = _claimed_kernels(finding, self.analyzed_ledger, self.analyzed)
        total = float(ns.sum())
        if not len(rows):
            return _KernelPart(weights, total, {}, None, False)
        layer_of = self.analyzed.kernels["layer"].to_numpy(dtype=object)
        layers = (layer_of[rows], ns.astype(np.float64))
        if self.samples.frames.empty:
            return _KernelPart(weights, total, {}, layers, False)
        mine, theirs, share = _matched_rows(rows, ns, self.analyzed, self.sampled)
        codes = self.samples.at(*_launches_at(self.sampled, theirs))
        user = codes >= 0
        np.add.at(weights, codes[user], share[user])
        lines = self.samples.line_of[codes[user]]
        frame = pd.DataFrame({"line": lines, "layer": layer_of[mine[user]], "ns": share[user]}).dropna()
        modules = {
            int(line): str(group.groupby("layer")["ns"].sum().idxmax())
            for line, group in frame.groupby("line")
        }
        return _KernelPart(weights, total, modules, layers, len(theirs) > 0)
