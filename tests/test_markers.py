"""The names the injector writes are the names the loaders read: both take them from hybrid.markers, and no
module of the injector spells its own copy (where a copy would drift from what the loaders read)."""

from __future__ import annotations

import re
from pathlib import Path

from hybrid import markers
from hybrid.inject import rank, stepping

INJECT = Path(__file__).resolve().parents[1] / "hybrid" / "inject"
NAMES = [name for name in vars(markers) if name.isupper()]


def test_the_injector_writes_the_names_the_loaders_read():
    assert {"INJECT_FILE", "TRACE_FILE", "STEP_DOMAIN", "TORCH_STEP_NAME", "RANK_DIR_FORMAT"} <= set(NAMES)
    used = [name for name in NAMES if hasattr(stepping, name)]
    assert {"INJECT_FILE", "TRACE_FILE", "STEP_DOMAIN", "MODULE_DOMAIN", "TORCH_STEP_PREFIX"} <= set(used)
    for name in used:
        assert getattr(stepping, name) is getattr(markers, name), name
    assert rank.RANK_DIR_FORMAT is markers.RANK_DIR_FORMAT
    assigned = re.compile(rf"^({'|'.join(NAMES)})\s*[:=]", re.MULTILINE)
    for module in sorted(INJECT.glob("*.py")):
        assert not assigned.findall(module.read_text()), module.name


def test_the_torch_step_name_reads_both_step_markers_the_injector_has_written():
    assert markers.TORCH_STEP_NAME.match(f"{markers.TORCH_STEP_PREFIX}12")[1] == "12"
    assert markers.TORCH_STEP_NAME.match(f"{markers.LEGACY_TORCH_STEP_PREFIX}3")[1] == "3"
    assert markers.TORCH_STEP_NAME.match("ProfilerStep#x") is None
