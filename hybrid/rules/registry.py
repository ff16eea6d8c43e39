"""Every rule the analysis runs, family by family."""

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

FAMILIES = (roofline, kernel_launch, synchronization, cpu_residency, data_pipeline, occupancy, memory_hierarchy,
            tensor_core, compiler_graph)

RULES: tuple[Rule, ...] = tuple(rule for family in FAMILIES for rule in family.RULES)

# Families that describe the GPU; with no GPU they cannot apply.
GPU_CATEGORIES = ("ROOFLINE", "KERNEL_LAUNCH", "SYNCHRONIZATION", "DATA_PIPELINE", "OCCUPANCY", "MEMORY_HIERARCHY",
                  "TENSOR_CORE", "COMPILER_GRAPH")
