"""Bottleneck rules, one module per family; `registry.RULES` lists them all."""
