"""Kernels whose grid leaves SMs without a block: the small-grid metrics and the ledger's small_grid cause
read the same kernels here."""

from __future__ import annotations

import numpy as np


def small_grid(blocks: np.ndarray, sm_count: int | None) -> np.ndarray:
    """Grids of more than one block and fewer blocks than SMs. A grid of one block is the kernel's own
    serial design, which neither a larger batch nor more SMs spread: torchvision nms's
    gather_keep_from_mask<<<1, 47>>>, CUB's single-tile passes and sorts took 68% of the torchvision
    detector's small-grid time (H200), which the small-grid finding claimed a full grid would run 132 times
    faster."""
    if not sm_count:
        return np.zeros(len(blocks), bool)
    return (blocks > 1) & (blocks < sm_count)
