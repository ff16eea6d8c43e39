"""Whether the step runs the same tensor shapes every time: the shapes the step's top-level operators took,
one signature per step. A loop that pads each batch to its own longest sequence (a collate function with
dynamic padding) runs new shapes nearly every step: CUDA graphs then record one graph per shape, and the
per-shape work of libraries (cuDNN attention builds an execution plan for each new sequence length: +61 ms
on the slow steps of an H100 BERT-base fine-tune, benchmarks/results/s24_h100) recurs."""

from __future__ import annotations

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
    return {
        "step_shape_signatures": Metric(int(signatures.nunique()), "shape sets", src),
        "step_shape_steps": Metric(len(signatures), "steps", src),
    }


def shapes_change_per_step(signatures: float, steps: float) -> bool:
    """The steps ran MIN_SIGNATURES or more sets of shapes, one per STEPS_PER_SIGNATURE steps or more."""
    return signatures >= MIN_SIGNATURES and signatures * STEPS_PER_SIGNATURE >= steps


def _has_tensor(shapes: object) -> bool:
    return isinstance(shapes, list) and any(isinstance(d, list) and d for d in shapes)
