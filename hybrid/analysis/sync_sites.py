"""Whose code the host sat in during the step's synchronizations: the Python samples taken while the host
was blocked in a sync, by the library frame each shows (nsight.python_frames.first_library_frame). Where
most of that time sits in an installed library (torchvision's detection post-processing, torch_geometric's
graph normalization), the sync advice names that code instead of telling the user to edit their loop."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from hybrid.analysis.steps import frame_source, in_steps
from hybrid.profile import Profile
from hybrid.provenance import Metric
from nsight.intervals import NO_RANGE, interval_union, stab_disjoint
from nsight.python_frames import library_package, library_site

# Fewer samples inside the syncs than this say nothing of whose code they are (nsys samples the host at
# 1 kHz: torch_geometric's GCN, 1.63 ms a step in syncs over 20 steps, gave 28 on its syncing thread).
MIN_SYNC_SAMPLES = 10
TOP_SITES = 3


def sync_site_metrics(profile: Profile, steps: pd.DataFrame) -> dict[str, Metric]:
    """`sync_sampled` (samples taken inside the steps' syncs), `sync_library_package` (the library whose
    frames most of them show), `sync_library_pct` (their share in that library) and `sync_library_sites`
    (its frames, each with its share); nothing where the samples are too few, no library where none
    shows one (the user's own lines synced, or the torch pass's stacks, which name no library frame)."""
    syncs = in_steps(profile.syncs, steps)
    samples = profile.samples
    if syncs.empty or samples.empty or "library_file" not in samples:
        return {}
    inside = np.zeros(len(samples), bool)
    # A sample inside a sync of its own thread: another thread's (tqdm's monitor beside
    # sentence-transformers' encode loop) shows what that thread ran, not what blocked.
    for tid, own in syncs.groupby("tid"):
        starts, ends = interval_union(own["start_ns"].to_numpy(np.int64), own["end_ns"].to_numpy(np.int64))
        mine = np.flatnonzero(samples["tid"].to_numpy(np.int64) == tid)
        inside[mine] = stab_disjoint(samples["start_ns"].to_numpy(np.int64)[mine], starts, ends) != NO_RANGE
    sampled = samples[inside]
    if len(sampled) < MIN_SYNC_SAMPLES:
        return {}
    src = frame_source(profile, "samples")
    out = {"sync_sampled": Metric(float(len(sampled)), "samples", src)}
    library = sampled[sampled["library_file"].notna()]
    if library.empty:
        return out
    packages = [library_package(str(f)) for f in library["library_file"]]
    package, _ = Counter(packages).most_common(1)[0]
    own = library[[p == package for p in packages]]
    out["sync_library_pct"] = Metric(100.0 * len(own) / len(sampled), "%", src)
    sites = Counter(
        library_site(str(f), int(line), fn if isinstance(fn, str) else None)
        for f, line, fn in zip(own["library_file"], own["library_line"], own["library_function"], strict=True)
    )
    out["sync_library_package"] = Metric(str(package), "", src)
    out["sync_library_sites"] = Metric(
        ", ".join(f"{site} ({100.0 * n / len(sampled):.0f}%)" for site, n in sites.most_common(TOP_SITES))
        + (f" (+{len(sites) - TOP_SITES} more)" if len(sites) > TOP_SITES else ""),
        "",
        src,
    )
    return out
