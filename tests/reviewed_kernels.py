"""The kernel names of the committed captures as classified and reviewed by hand
(tests/fixtures/kernel_classes.tsv), for the tests that read them."""

from __future__ import annotations

from pathlib import Path

REVIEWED = Path(__file__).resolve().parent / "fixtures" / "kernel_classes.tsv"


def reviewed_kernels() -> dict[str, tuple[str, str | None]]:
    """Each reviewed kernel name's (kind, precision), None where the name states no precision."""
    out = {}
    for line in REVIEWED.read_text().splitlines():
        if line.startswith("#"):
            continue
        kind, precision, name = line.split("\t", 2)
        out[name] = (kind, None if precision == "-" else precision)
    return out
