"""Whether the step runs the same tensor shapes every time: the shapes the step's top-level operators took,
one signature per step. A loop that pads each batch to its own longest sequence (a collate function with
dynamic padding) runs new shapes nearly every step: CUDA graphs then record one graph per shape, and the
per-shape work of libraries (cuDNN attention builds an execution plan for each new sequence length: +61 ms
on the slow steps of an H100 BERT-base fine-tune, benchmarks/results/s24_h100) recurs."""

from __future__ import annotations

import math

import pandas as pd

from hybrid.provenance import Metric

# Steps' shapes count as changing where they make at least this many signatures, and one per this many
# steps: a last partial batch or an evaluation every N steps adds one or two, not one a step.
MIN_SIGNATURES = 3
STEPS_PER_SIGNATURE = 4


def step_shape_metrics(top: pd.DataFrame, src: str) -> dict[str, Metric]:
    """`step_shape_signatures` (how many different sets of input shapes the steps' top-level operators
    ran) and `step_shape_steps` (over how many steps), from operators that recorded tensor shapes; {}
    where none did (no torch pass, or shapes not recorded)."""
    shaped = top[top["shapes"].map(_has_tensor)]
    if shaped.empty:
        return {}
    ordered = shaped.sort_values(["step", "start_ns"])
    calls = ordered["name"].astype(str) + ordered["shapes"].map(repr)
    signatures = calls.groupby(ordered["step"], sort=False).agg(tuple)
    out = {
        "step_shape_signatures": Metric(int(signatures.nunique()), "shape sets", src),
        "step_shape_steps": Metric(len(signatures), "steps", src),
    }
    varying = varying_input(ordered)
    if varying is not None:
        out["step_varying_input"] = Metric(varying[0], "", src)
        out["step_varying_sizes"] = Metric(", ".join(map(str, varying[1])), "sizes", src)
    return out


def varying_input(ordered: pd.DataFrame) -> tuple[str, list[int]] | None:
    """The first operator of the step whose input shape changes from step to step, written with its
    varying dimension as L ("aten::to [32, L]": a batch of token ids padded to its longest sentence), and
    the sizes L took, smallest first; None where the steps run different operators (then the shapes are
    not comparable position by position) or the same shapes. Of several varying dimensions, the one of
    most sizes (the others show as *)."""
    steps = [
        list(zip(group["name"].astype(str), group["shapes"], strict=True))
        for _, group in ordered.groupby("step", sort=False)
    ]
    if len(steps) < 2 or any([n for n, _ in s] != [n for n, _ in steps[0]] for s in steps[1:]):
        return None
    for position, (name, first) in enumerate(steps[0]):
        shapes = [s[position][1] for s in steps]
        if all(shape == first for shape in shapes):
            continue
        dims = _varying_dims(shapes)
        if not dims:
            return None
        sizes = {dim: sorted({shape[dim[0]][dim[1]] for shape in shapes}) for dim in dims}
        chosen = max(dims, key=lambda dim: len(sizes[dim]))
        varied = {axis for arg, axis in dims if arg == chosen[0]}
        shown = [
            "L" if axis == chosen[1] else "*" if axis in varied else str(size)
            for axis, size in enumerate(first[chosen[0]])
        ]
        return f"{name} [{', '.join(shown)}]", [int(size) for size in sizes[chosen]]
    return None


def _varying_dims(shapes: list) -> list[tuple[int, int]]:
    """(argument, axis) of every tensor dimension that differs between the shapes, where each shape has
    the same arguments of the same ranks (else [])."""
    first = shapes[0]
    ranks = [len(arg) if isinstance(arg, list) else -1 for arg in first]
    for shape in shapes[1:]:
        if len(shape) != len(first) or [len(a) if isinstance(a, list) else -1 for a in shape] != ranks:
            return []
    return [
        (arg, axis)
        for arg, rank in enumerate(ranks)
        for axis in range(max(rank, 0))
        if isinstance(first[arg][axis], int) and len({shape[arg][axis] for shape in shapes}) > 1
    ]


# The padding multiples offered, and how many sizes padding may leave: a few shapes each compiled, recorded
# and planned once (cuDNN attention planned each new sequence length: +61 ms a slow step on the H100 BERT).
PAD_MULTIPLES = (8, 16, 32, 64, 128, 256, 512, 1024)
MAX_PADDED_SIZES = 4


def padding_buckets(sizes: list[int]) -> tuple[int, list[int]]:
    """The smallest multiple of PAD_MULTIPLES that pads `sizes` into at most MAX_PADDED_SIZES sizes, and
    fewer than they are (8, the tensor cores' alignment, where it does; the largest where none does), and
    the sizes it leaves."""
    for multiple in PAD_MULTIPLES:
        padded = sorted({multiple * math.ceil(size / multiple) for size in sizes})
        if len(padded) <= MAX_PADDED_SIZES and len(padded) < len(set(sizes)):
            break
    return multiple, padded


def shapes_change_per_step(signatures: float, steps: float) -> bool:
    """The steps ran MIN_SIGNATURES or more sets of shapes, one per STEPS_PER_SIGNATURE steps or more."""
    return signatures >= MIN_SIGNATURES and signatures * STEPS_PER_SIGNATURE >= steps


def _has_tensor(shapes: object) -> bool:
    return isinstance(shapes, list) and any(isinstance(d, list) and d for d in shapes)
