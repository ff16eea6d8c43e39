"""Host time inside a torch DataLoader is told apart from numpy work in the loop body, on the H200
planted captures: data_loader_workers0 (num_workers=0, per-item numpy in Dataset.__getitem__) and
cpu_numpy_augment (the same kind of numpy work written in the training loop, no DataLoader)."""

from __future__ import annotations

import copy
import gzip
import json
import warnings
from functools import cache
from pathlib import Path

import pytest

from hybrid.analysis.analyze import analyze
from hybrid.load.nsys_export import load_nsys_export
from hybrid.load.torch_trace import load_torch_trace
from hybrid.pipeline import merge
from hybrid.profile import ANNOTATION_PREFIX

PLANTED = Path(__file__).parent / "fixtures" / "planted"
LOADER_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
STEPS = 5


def _trace(name: str) -> Path:
    return PLANTED / name / "run" / "torch" / "trace.json.gz"


@cache
def _torch(name: str):
    return load_torch_trace(_trace(name))


def _analysis(name: str, mode: str) -> dict:
    torch_profile = copy.deepcopy(_torch(name))
    nsys = load_nsys_export(PLANTED / name / "run" / "nsys" / "profile.sqlite") if mode == "nsys" else None
    return analyze(merge(torch_profile, nsys)).document


def _finding(doc: dict, rule_id: str) -> dict | None:
    return next((f for f in doc["diagnosis"]["bottlenecks"] if f["id"] == rule_id), None)


def _device_busy_ns(events: list[dict], start_us: float, end_us: float) -> float:
    """Time in [start, end) covered by any kernel, copy or memset, by a plain sweep over the raw events."""
    spans = sorted(
        (max(e["ts"], start_us), min(e["ts"] + e["dur"], end_us))
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        and e["ts"] < end_us
        and e["ts"] + e["dur"] > start_us
    )
    busy, reach = 0.0, start_us
    for lo, hi in spans:
        if hi > reach:
            busy += hi - max(lo, reach)
            reach = hi
    return busy * 1000.0


def test_dataloader_fetches_are_kept_as_annotation_rows_outside_the_operator_tree():
    ops = _torch("data_loader_workers0").ops
    fetches = ops[ops["name"] == ANNOTATION_PREFIX + LOADER_NEXT]
    assert sorted(fetches["step"]) == list(range(STEPS))  # one batch fetched per measured step
    assert not fetches["top_level"].any() and (fetches["cpu_self_ns"] == 0).all()
    # Operators keep their own accounting: self CPU time still sums to the top-level ops' time.
    operators = ops[~ops["name"].str.startswith(ANNOTATION_PREFIX)]
    top = operators[operators["top_level"]]
    assert operators["cpu_self_ns"].sum() == (top["end_ns"] - top["start_ns"]).sum()
    # ~37 ms of host time a step goes into building the batch (0.3 ms of numpy per item, batch 128).
    assert 30e6 < (fetches["end_ns"] - fetches["start_ns"]).mean() < 45e6


def test_device_idle_time_inside_each_fetch_matches_a_sweep_over_the_raw_trace():
    raw = json.loads(gzip.decompress(_trace("data_loader_workers0").read_bytes()))["traceEvents"]
    marks = sorted(
        (e for e in raw if e.get("cat") == "user_annotation" and e["name"] == LOADER_NEXT),
        key=lambda e: e["ts"],
    )
    ops = _torch("data_loader_workers0").ops
    fetches = ops[ops["name"] == ANNOTATION_PREFIX + LOADER_NEXT].sort_values("start_ns")
    for mark, idle_ns in zip(marks, fetches["device_idle_ns"], strict=True):
        expected = mark["dur"] * 1000.0 - _device_busy_ns(raw, mark["ts"], mark["ts"] + mark["dur"])
        # The loader rounds each event edge to whole ns: a few ns over the hundreds of kernels overlapped.
        assert idle_ns == pytest.approx(expected, abs=1000)
    # The first fetch of the window has an empty queue; later ones overlap the previous step's tail.
    first = fetches.iloc[0]
    assert first["device_idle_ns"] == first["end_ns"] - first["start_ns"]
    assert (
        fetches["device_idle_ns"].iloc[1:] < fetches["end_ns"].iloc[1:] - fetches["start_ns"].iloc[1:]
    ).all()


@pytest.mark.parametrize("mode", ["torch-only", "nsys"])
def test_dataloader_capture_is_diagnosed_as_data_pipeline(mode):
    doc = _analysis("data_loader_workers0", mode)
    primary = doc["diagnosis"]["primary_bottleneck"]
    assert (primary["id"], primary["category"]) == ("data.loader_stall", "DATA_PIPELINE")
    assert "num_workers" in primary["suggestions"][0]
    metrics = doc["metrics"]
    assert metrics["data_loader_iterator"]["value"] == "_SingleProcessDataLoaderIter"
    assert metrics["data_loader_idle_ms"]["source"] == "measured:torch"
    # The loader's time is the device idle time inside its fetches (on the nsys timeline, carried there
    # from the torch pass); host preprocessing in the loop body reads the other host work only.
    pools = doc["ledger"]["ms_per_step"]
    assert primary["time_lost_ms"] == pytest.approx(pools["dataloader_fetch"])
    assert primary["time_lost_ms"] > 0.9 * metrics["gpu_idle_ms"]["value"]
    preprocessing = _finding(doc, "cpu.preprocessing")
    assert (
        preprocessing is None
        or preprocessing["time_lost_ms"] <= pools["host_after_sync"] + pools["host_other"]
    )


@pytest.mark.parametrize("mode", ["torch-only", "nsys"])
def test_numpy_in_the_loop_body_stays_cpu_residency(mode):
    doc = _analysis("cpu_numpy_augment", mode)
    assert "data_loader_ms" not in doc["metrics"]
    assert _finding(doc, "data.loader_stall") is None
    primary = doc["diagnosis"]["primary_bottleneck"]
    assert primary["id"] == "cpu.preprocessing"
    # The host work while the device idled, less the part after a sync that the sync finding claims.
    pools = doc["ledger"]["ms_per_step"]
    sync = _finding(doc, "sync.per_step")
    by_sync = (
        0.0 if sync is None else max(0.0, sync["time_lost_ms"] - pools["sync_wait"] - pools["blocking_copy"])
    )
    assert by_sync < 0.05 * primary["time_lost_ms"]
    assert primary["time_lost_ms"] == pytest.approx(
        pools["host_after_sync"] + pools["host_other"] - by_sync, abs=1e-4
    )
    assert primary["time_lost_ms"] > 0.9 * (
        doc["metrics"]["idle_host_other_ms"]["value"] + doc["metrics"]["idle_host_after_sync_ms"]["value"]
    )


def test_a_trace_without_copies_loads_without_pandas_warnings(tmp_path):
    # The sync-frame join used to fillna("") a float column when no copy matched a runtime call.
    raw = json.loads(gzip.decompress(_trace("cpu_numpy_augment").read_bytes()))
    raw["traceEvents"] = [e for e in raw["traceEvents"] if e.get("cat") != "gpu_memcpy"]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profile = load_torch_trace(path)
    assert profile.memcpys.empty and not profile.kernels.empty
