"""Every rule the analysis runs, in the order they draw on the ledger's pools: the specific causes
before the generic ones that share a pool with them (graph breaks before launch gaps, syncs before
the host work after them, tensors made on the host before batched copies before pinning)."""

from __future__ import annotations

from hybrid.rules import (
    compiler_graph,
    cpu_residency,
    data_pipeline,
    kernel_launch,
    memory_hierarchy,
    occupancy,
    roofline,
    synchronization,
    tensor_core,
)
from hybrid.rules.base import Rule

FAMILIES = (
    tensor_core,
    occupancy,
    memory_hierarchy,
    roofline,
    compiler_graph,
    synchronization,
    kernel_launch,
    cpu_residency,
    data_pipeline,
)

RULES: tuple[Rule, ...] = tuple(rule for family in FAMILIES for rule in family.RULES)
RULE_BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}

# Families that describe the GPU; with no GPU they cannot apply.
GPU_CATEGORIES = (
    "ROOFLINE",
    "KERNEL_LAUNCH",
    "SYNCHRONIZATION",
    "DATA_PIPELINE",
    "OCCUPANCY",
    "MEMORY_HIERARCHY",
    "TENSOR_CORE",
    "COMPILER_GRAPH",
)
