"""Reading Profile.ops, torch's op and annotation ranges: which rows are annotations, which are outermost in
their thread, the GPU time under each op, and the names of the ranges and ops the analysis looks for (a
DataLoader's batch fetch, torch.compile's regions, DDP's own ops, tensors created on the host and moved).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from hybrid.profile import ANNOTATION_PREFIX

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
DDP_OP = re.compile(r"^(?:torch\.distributed\.ddp\.|DistributedDataParallel\.)")
# torch.utils.data.DataLoader wraps each batch fetch in record_function(f"enumerate(DataLoader)#
# {iterator class}.__next__") (torch/utils/data/dataloader.py, _BaseDataLoaderIter.__next__): the
# host time to produce a batch, whether the main process builds it (num_workers=0) or waits for a worker.
DATA_LOADER_NEXT = re.compile(re.escape(ANNOTATION_PREFIX) + r"enumerate\(DataLoader\)#(\w+)\.__next__$")
# torch.compile wraps each compiled frame's run in a record_function range of this name (one per
# graph piece when breaks split the frame; a break's eager code and resume run inside the outer one).
COMPILED_REGION_PREFIX = "Torch-Compiled Region"


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


def is_annotation(names: pd.Series) -> pd.Series:
    """Rows of Profile.ops that are user annotations, not operators (profile.ANNOTATION_PREFIX)."""
    return names.str.startswith(ANNOTATION_PREFIX)


def outermost(ops: pd.DataFrame) -> pd.DataFrame:
    """Rows not nested in an earlier row of the same thread (ranges of one thread nest or follow)."""
    ops = ops.sort_values(["tid", "start_ns"], kind="stable")
    reach = ops.groupby("tid")["end_ns"].transform(
        lambda e: e.cummax().shift(fill_value=np.iinfo(np.int64).min)
    )
    return ops[ops["start_ns"].to_numpy() >= reach.to_numpy()]
