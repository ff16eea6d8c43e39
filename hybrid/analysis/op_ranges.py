"""Reading Profile.ops, torch's op and annotation ranges: which rows are annotations, which are outermost in
their thread, the GPU time under each op, and the names of the ranges and ops the analysis looks for (a
DataLoader's batch fetch, torch.compile's regions, DDP's own ops, tensors created on the host and moved).
The selections the metrics and the ledger both make (the CPU-heavy operators, the outermost compiled
regions, the batch fetches) are made here, so the metric and the ledger's cause count the same ranges.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from hybrid.profile import ANNOTATION_PREFIX, name_matches, name_starts

CREATE_OPS = {
    "aten::randn",
    "aten::rand",
    "aten::randint",
    "aten::zeros",
    "aten::ones",
    "aten::full",
    "aten::empty",
    "aten::tensor",
    "aten::from_numpy",
    "aten::arange",
    "aten::linspace",
    "aten::lift_fresh",
    "aten::scalar_tensor",
}
MOVE_OPS = {"aten::to", "aten::_to_copy", "aten::copy_", "aten::cuda"}
# Ops whose result shape depends on the data: they copy a count to the host and wait for it.
DATA_DEPENDENT_OPS = (
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique2",
    "aten::repeat_interleave",
)
DDP_OP = re.compile(r"^(?:torch\.distributed\.ddp\.|DistributedDataParallel\.)")
# torch.utils.data.DataLoader wraps each batch fetch in record_function(f"enumerate(DataLoader)#
# {iterator class}.__next__") (torch/utils/data/dataloader.py, _BaseDataLoaderIter.__next__): the
# host time to produce a batch, whether the main process builds it (num_workers=0) or waits for a worker.
DATA_LOADER_NEXT = re.compile(re.escape(ANNOTATION_PREFIX) + r"enumerate\(DataLoader\)#(\w+)\.__next__$")
# torch.compile wraps each compiled frame's run in a record_function range of this name (one per
# graph piece when breaks split the frame; a break's eager code and resume run inside the outer one).
COMPILED_REGION_PREFIX = "Torch-Compiled Region"
# CPU-heavy op: CPU time more than 10x the GPU time it caused (brief; PyTorch profiler guidance).
CPU_HEAVY_RATIO = 10.0


def op_subtree_device_ns(ops: pd.DataFrame) -> pd.Series:
    """GPU time caused by each op and everything it called (same thread, nested in time): a convolution's
    kernels are launched by the cuDNN op under it."""
    out = pd.Series(0, index=ops.index, dtype="int64")
    for _, group in ops.groupby("tid"):
        g = group.sort_values("start_ns")
        starts = g["start_ns"].to_numpy()
        cum = np.r_[0, np.cumsum(g["device_ns"].to_numpy())]
        lo = np.searchsorted(starts, starts, side="left")
        hi = np.searchsorted(starts, g["end_ns"].to_numpy(), side="left")
        out.loc[g.index] = cum[hi] - cum[lo]
    return out


def is_annotation(names: pd.Series) -> np.ndarray:
    """Rows of Profile.ops that are user annotations, not operators (profile.ANNOTATION_PREFIX)."""
    return name_starts(names, ANNOTATION_PREFIX)


def outermost(ops: pd.DataFrame) -> pd.DataFrame:
    """Rows not nested in an earlier row of the same thread (ranges of one thread nest or follow)."""
    ops = ops.sort_values(["tid", "start_ns"], kind="stable")
    reach = ops.groupby("tid")["end_ns"].transform(
        lambda e: e.cummax().shift(fill_value=np.iinfo(np.int64).min)
    )
    return ops[ops["start_ns"].to_numpy() >= reach.to_numpy()]


def top_level_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """The top-level operators of `ops` (annotations dropped), each with the GPU time it and everything it
    called caused (`device_total_ns`) and its host time (`cpu_ns`)."""
    ops = ops[~is_annotation(ops["name"])]
    top = ops[ops["top_level"]]
    return top.assign(
        device_total_ns=op_subtree_device_ns(ops).loc[top.index], cpu_ns=top["end_ns"] - top["start_ns"]
    )


def cpu_heavy_by_name(top: pd.DataFrame) -> pd.DataFrame:
    """Per name of the top-level ops (top_level_ops) that caused GPU work, the summed `cpu_ns` and
    `device_total_ns` of the names whose host time exceeds CPU_HEAVY_RATIO x that GPU time, most host
    time first."""
    by_name = top[top["device_total_ns"] > 0].groupby("name")[["cpu_ns", "device_total_ns"]].sum()
    heavy = by_name[by_name["cpu_ns"] > CPU_HEAVY_RATIO * by_name["device_total_ns"]]
    return heavy.sort_values("cpu_ns", ascending=False)


def compiled_regions(ops: pd.DataFrame) -> pd.DataFrame:
    """The outermost torch.compile'd regions among `ops` (a graph break's pieces run inside them)."""
    return outermost(ops[name_starts(ops["name"], COMPILED_REGION_PREFIX)])


def data_loader_fetches(ops: pd.DataFrame) -> pd.DataFrame:
    """The DataLoader batch fetches (DATA_LOADER_NEXT ranges) among `ops`."""
    return ops[name_matches(ops["name"], DATA_LOADER_NEXT)]
