"""The typed diagnosis between the rules and results.json: the stages run in their declared order on the
rules' findings, a figure no stage set stays out of the document, and the reader's type table describes
the same fields the diagnosis writes. On the committed H200 capture planted/data_loader_workers0."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hybrid.analysis.analyze import analyze
from hybrid.analysis.diagnosis import Diagnosis
from hybrid.pipeline import diagnose, load_run_dir, merged_profile, stages
from hybrid.rules.base import STAGE_FIELDS, Finding
from hybrid.schema import FINDING_TYPES

RUN = Path(__file__).parent / "fixtures" / "planted" / "data_loader_workers0" / "run"


def _profile():
    run, torch_profile, nsys_profile, csv = load_run_dir(RUN)
    return merged_profile(run, torch_profile, nsys_profile, csv)[0], torch_profile


def test_the_rules_findings_carry_no_stage_figure_until_a_stage_sets_it():
    profile, _ = _profile()
    document, diagnosis, _ = analyze(profile)
    assert diagnosis.findings and all(
        f.time_lost_method is None and f.callsites is None for f in diagnosis.findings
    )
    written = document["diagnosis"]["bottlenecks"]
    # What no stage set is left out, not written as null (renderers test some of these keys for presence).
    assert not any(key in finding for finding in written for key in STAGE_FIELDS)
    # The engine's draw is written: each measured finding's claimed time adds up to the time it lost.
    for finding in diagnosis.findings:
        if finding.claimed:
            assert sum(finding.claimed.values()) == pytest.approx(finding.time_lost_ms)


def test_the_stages_run_in_order_and_the_diagnosis_writes_one_order_and_one_primary():
    assert [stage.__name__ for stage in stages()] == [
        "attach_callsites",
        "weigh_at_plain_step",
        "replay_findings",
        "correct_by_verified",
        "attach_verified",
        "grade",
    ]
    profile, torch_profile = _profile()
    document, diagnosis = diagnose(profile, baseline_step_ms=None, stack_profiles=[torch_profile])
    stall = next(f for f in diagnosis.findings if f.id == "data.loader_stall")
    assert stall.time_lost_method == "replay" and stall.callsites is not None
    written = document["diagnosis"]
    assert [b["id"] for b in written["bottlenecks"]] == [f.id for f in diagnosis.ordered()]
    assert written["primary_bottleneck"]["id"] == diagnosis.primary().id
    assert all(b["weighed_lost_ms"] == pytest.approx(b["time_lost_ms"]) for b in written["bottlenecks"])


def test_the_readers_type_table_names_only_fields_the_diagnosis_writes():
    written = {field.name for field in dataclasses.fields(Finding)} | {"weighed_lost_ms", "weighed_on"}
    assert set(FINDING_TYPES) <= written
    assert isinstance(Diagnosis([], timing={}).to_dict()["bottlenecks"], list)
