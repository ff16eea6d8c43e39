"""Terminal formatting details: kernel names from a real nsys export shortened to what identifies them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hybrid.report import format_value, short_name

EXPORT = Path(__file__).parent / "fixtures" / "h200-probe" / "nsys_matmul_copy.sqlite"


def _kernel_names() -> list[str]:
    with sqlite3.connect(f"file:{EXPORT}?mode=ro", uri=True) as db:
        return [row[0] for row in db.execute(
            "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName")]


def test_long_template_names_keep_the_identifying_part():
    names = _kernel_names()
    shortened = {short_name(name) for name in names}
    assert all(len(name) <= 72 for name in shortened)
    assert "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT" in shortened  # short names pass unchanged
    assert "vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<...>, array<...>>" in shortened
    assert "reduce_kernel<512, 1, ReduceOp<...>>" in shortened


def test_values_read_with_units_and_missing_is_not_zero():
    assert format_value(33554432, "B") == "32 MiB"
    assert format_value(7.65e14, "FLOP/s") == "765 TFLOP/s"
    assert format_value(92.812, "%") == "92.8%"
    assert format_value(None, "ms") == "n/a"
    assert format_value(float("nan"), "ms") == "n/a"
    assert format_value(0.0, "ms") == "0 ms"
