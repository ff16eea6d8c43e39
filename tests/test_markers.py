"""The names the injector writes are the names the loaders read (hybrid.markers). hybrid/inject/ still
spells its own copies; until it imports them from hybrid.markers, this says where they drift."""

from __future__ import annotations

from hybrid import markers
from hybrid.inject import rank, stepping


def test_the_injector_writes_the_names_the_loaders_read():
    written = {
        "INJECT_FILE": stepping.INJECT_FILE,
        "TRACE_FILE": stepping.TRACE_FILE,
        "OP_FLOPS_FILE": stepping.OP_FLOPS_FILE,
        "STEP_DOMAIN": stepping.STEP_DOMAIN,
        "MODULE_DOMAIN": stepping.MODULE_DOMAIN,
        "TORCH_STEP_PREFIX": stepping.TORCH_STEP_PREFIX,
        "LEGACY_TORCH_STEP_PREFIX": stepping.LEGACY_TORCH_STEP_PREFIX,
        "TORCH_STEP_NAME": stepping.TORCH_STEP_NAME.pattern,
        "RANK_DIR_FORMAT": rank.RANK_DIR_FORMAT,
    }
    read = {name: getattr(markers, name) for name in written}
    read["TORCH_STEP_NAME"] = markers.TORCH_STEP_NAME.pattern
    assert read == written


def test_the_torch_step_name_reads_both_step_markers_the_injector_has_written():
    assert markers.TORCH_STEP_NAME.match(f"{markers.TORCH_STEP_PREFIX}12")[1] == "12"
    assert markers.TORCH_STEP_NAME.match(f"{markers.LEGACY_TORCH_STEP_PREFIX}3")[1] == "3"
    assert markers.TORCH_STEP_NAME.match("ProfilerStep#x") is None
