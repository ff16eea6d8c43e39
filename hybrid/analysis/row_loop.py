"""A Python loop over the rows of one tensor in the step: the script indexes the tensor once per row (its
first dimension's length in aten::select / aten::slice / aten::narrow calls a step) and runs the same ops
once per row, each a handful of tiny kernels. The planted per-sample loss selects rows of a (512,) tensor 512
times a step and calls aten::cross_entropy_loss 512 times; the batch-1 server slices a (64, 256) batch 64
times and runs aten::linear 2048 times (64 rows through 32 layers). No committed eager training capture
indexes a tensor as many times as it has rows (resnet50's most repeated top-level op is the 53 batch-norm
counters' aten::add_, the HF and compiled runs' the optimizer's aten::item)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from hybrid.numbers import NS_PER_MS

INDEXING_OPS = ("aten::select", "aten::slice", "aten::narrow")
# A loop over fewer rows is indistinguishable from a model indexing a small batch once per layer.
MIN_ROWS = 32
# Ops named beside the loop: those run a multiple of the row count a step, most host time first.
MAX_OPS_NAMED = 3


@dataclass(frozen=True)
class RowLoop:
    rows: int  # rows a step the loop walks (calls of the indexing op a step)
    indexing_op: str
    tensor_shape: list[int]
    # Ops run once (or a fixed number of times) per row, with their calls a step, most host time first.
    repeated_ops: list[tuple[str, int]]
    host_ms: float  # host time a step of the repeated ops and the indexing

    def tensor_text(self) -> str:
        """The tensor's shape as Python writes a tuple: (512,), (64, 256)."""
        dims = ", ".join(map(str, self.tensor_shape))
        return f"({dims},)" if len(self.tensor_shape) == 1 else f"({dims})"

    def ops_text(self) -> str:
        return ", ".join(f"{name} ×{calls}" for name, calls in self.repeated_ops)


def row_loop(top_ops: pd.DataFrame, steps: int) -> RowLoop | None:
    """The loop over the most rows in `top_ops` (top-level operators of the measured steps, on any thread),
    or None. `steps`: how many steps the frame holds."""
    if top_ops.empty or steps < 1:
        return None
    names = top_ops["name"].astype(str)
    indexing = top_ops[names.isin(INDEXING_OPS)]
    best: tuple[int, str, list[int]] | None = None
    keys = [names[indexing.index], indexing["shapes"].astype(str)]
    for (name, _shapes), group in indexing.groupby(keys):
        shapes = group["shapes"].iloc[0]
        first = shapes[0] if isinstance(shapes, list) and shapes and isinstance(shapes[0], list) else []
        calls = len(group) / steps
        if first and first[0] >= MIN_ROWS and calls == first[0] and (best is None or first[0] > best[0]):
            best = (int(first[0]), str(name), [int(d) for d in first])
    if best is None:
        return None
    rows, op, shape = best
    host_ns = (top_ops["end_ns"] - top_ops["start_ns"]).groupby(names).sum()
    calls = names.value_counts() / steps
    repeated = [
        name
        for name in host_ns.sort_values(ascending=False).index
        if name not in INDEXING_OPS and calls[name] >= rows and calls[name] % rows == 0
    ]
    in_loop = [*repeated, *INDEXING_OPS]
    # The loop's backward nodes repeat too (MulBackward0 x512); the forward ops are the ones to batch.
    named = [name for name in repeated if not name.startswith("autograd::")]
    return RowLoop(
        rows=rows,
        indexing_op=op,
        tensor_shape=shape,
        repeated_ops=[(name, int(calls[name])) for name in named[:MAX_OPS_NAMED]],
        host_ms=float(host_ns[host_ns.index.isin(in_loop)].sum()) / steps / NS_PER_MS,
    )
