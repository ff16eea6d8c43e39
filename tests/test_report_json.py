"""results.json writing: strict JSON a CI job can parse, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from hybrid.errors import UsageError
from hybrid.report.json_report import results_to_json, write_results
from hybrid.rules.base import Evidence, Finding

RESULTS_FILE = min((Path(__file__).parent / "fixtures" / "results").glob("*.json"))


def test_round_trip_of_a_results_document(tmp_path):
    results = json.loads(RESULTS_FILE.read_text())
    written = write_results(results, tmp_path / "results.json")
    assert json.loads(written.read_text()) == results
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left behind


def test_nan_inf_and_numpy_values_become_plain_json():
    finding = Finding(
        "sync.per_step",
        "t",
        "SYNCHRONIZATION",
        "LOW",
        [Evidence("blocked", np.float32(1.5), "ms", "measured:nsys")],
        "e",
        [],
    )
    text = results_to_json(
        {
            "a": float("nan"),
            "b": np.float64("inf"),
            "c": np.int64(7),
            "d": np.array([1, 2]),
            "e": np.bool_(True),
            "f": [finding],
            "g": -float("inf"),
        }
    )
    assert "NaN" not in text and "Infinity" not in text
    parsed = json.loads(text)
    assert parsed["a"] is None and parsed["b"] is None and parsed["g"] is None
    assert parsed["c"] == 7 and parsed["d"] == [1, 2] and parsed["e"] is True
    assert parsed["f"][0]["evidence"][0] == {
        "label": "blocked",
        "value": 1.5,
        "unit": "ms",
        "source": "measured:nsys",
    }


def test_rewrite_replaces_the_previous_file(tmp_path):
    target = tmp_path / "results.json"
    write_results({"run": 1}, target)
    write_results({"run": 2}, target)
    assert json.loads(target.read_text()) == {"run": 2}


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_directory_names_cause_and_fix(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(UsageError) as error:
            write_results({"run": 1}, tmp_path / "results.json")
        assert str(tmp_path) in error.value.cause and error.value.fix
    finally:
        tmp_path.chmod(0o700)


def test_target_that_is_a_directory_fails_cleanly(tmp_path):
    (tmp_path / "results.json").mkdir()
    with pytest.raises(UsageError):
        write_results({"run": 1}, tmp_path / "results.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # temporary file removed
