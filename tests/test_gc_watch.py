"""Python's garbage collections in the measured window, recorded by the injector in a real process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hybrid_cli import inject_argv

SCRIPT = Path(__file__).parent / "scripts" / "gc_every_fourth_step.py"


def _run(out: Path, *flags: str) -> dict:
    done = subprocess.run(
        inject_argv(out, "plain", str(SCRIPT), warmup=2, steps=8, flags=["--fixed-warmup", *flags]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads((out / "inject.json").read_text())


@pytest.fixture(scope="module")
def window(tmp_path_factory) -> dict:
    """inject.json of one run whose window is 8 steps after 2 of warmup."""
    return _run(tmp_path_factory.mktemp("gc") / "out")


def test_full_collections_in_the_window_are_counted_and_timed(window):
    inject = window
    facts = inject["gc"]
    # Steps 3-10 of the loop are measured: iterations 3 and 7 call gc.collect() (generation 2).
    assert inject["measured_steps"] == 8
    assert facts["enabled"] is True
    assert facts["collections"][2] >= 2
    # Each full collection re-scans 500k objects: milliseconds, not microseconds.
    assert facts["longest_ms"] > 1.0
    assert facts["longest_ms"] <= facts["ms"]


@pytest.mark.slow
def test_a_whole_run_capture_counts_every_collection_of_the_script(tmp_path):
    # The window is the whole script: all ten gc.collect() calls of its 40 iterations.
    inject = _run(tmp_path / "out", "--whole-run")
    assert inject["gc"]["collections"][2] >= 10


def test_a_full_collection_names_the_line_that_called_gc_collect(window):
    inject = window
    site = inject["gc"]["full_sites"][0]
    collect_line = next(
        n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if text.strip() == "gc.collect()"
    )
    assert (Path(site["file"]).resolve(), site["line"]) == (SCRIPT.resolve(), collect_line)
    assert site["explicit"] is True
    assert site["count"] == inject["gc"]["collections"][2]
    assert 0 < site["ms"] <= inject["gc"]["ms"]
