"""Whose code the host sat in during the step's syncs (hybrid.analysis.sync_sites), from the Python samples
of real nsys exports: torchvision's Faster R-CNN eval and torch_geometric's GCN (H200) sync inside their
libraries; the planted cuda.synchronize loop (H100) syncs in its own lines; sentence-transformers' encode
loop runs tqdm's monitor thread beside its syncs."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.analysis.steps import steady_steps
from hybrid.analysis.sync_sites import MIN_SYNC_SAMPLES, sync_site_metrics
from hybrid.load.nsys_export import load_nsys_export
from nsight.python_frames import first_library_frame, is_user_file, library_package
from nsight.python_samples import read_python_samples
from nsight.sqlite_export import open_export

FIXTURES = Path(__file__).parent / "fixtures"
UNMARKED = FIXTURES / "unmarked_runs"


def _metrics(export: Path) -> dict:
    profile = load_nsys_export(export)
    return {name: m.value for name, m in sync_site_metrics(profile, steady_steps(profile)).items()}


def test_a_library_frame_is_an_installed_packages_other_than_pytorchs():
    site = "/usr/local/lib/python3.12/dist-packages"
    assert library_package(f"{site}/torchvision/ops/boxes.py") == "torchvision"
    assert library_package(f"{site}/torch/nn/modules/module.py") is None
    assert library_package("/usr/lib/python3.12/threading.py") is None
    assert library_package("/home/me/train.py") is None
    boxes, module, user = (
        (f"{site}/torchvision/ops/boxes.py", 48, "nms"),
        (f"{site}/torch/nn/modules/module.py", 1790, "_call_impl"),
        ("/home/me/eval.py", 15, "<module>"),
    )
    # Leaf first: the library code the user's line reached the call through, past PyTorch's own wrappers.
    assert first_library_frame([module, boxes, module, user]) == boxes
    # The user's own line made the call (through torch only): no library frame.
    assert first_library_frame([module, user, boxes]) is None


def test_each_sample_keeps_its_library_frame_beside_its_user_line():
    export = open_export(UNMARKED / "pyg_gcn_train" / "run" / "nsys" / "profile.sqlite")
    samples = read_python_samples(export, 0, 2**62)
    assert samples is not None and len(samples.library) == len(samples.line)
    placed = [
        (file, frame) for file, frame in zip(samples.file, samples.library, strict=True) if frame is not None
    ]
    assert placed
    assert {library_package(frame[0]) for _, frame in placed} >= {"torch_geometric"}
    # A library frame lies under one of the user's lines, or under none (a thread without user code).
    assert all(file is None or file.endswith("pyg_gcn_train.py") for file, _ in placed)


def test_syncs_inside_torchvision_are_placed_in_its_functions():
    found = _metrics(UNMARKED / "torchvision_detection_eval" / "run" / "nsys" / "profile.sqlite")
    assert found["sync_sampled"] >= MIN_SYNC_SAMPLES
    assert found["sync_library_package"] == "torchvision"
    assert found["sync_library_pct"] > 90
    top = found["sync_library_sites"].split(", ")[0]
    assert top.startswith("torchvision/ops/boxes.py:48 nms (")


def test_syncs_inside_torch_geometric_are_placed_in_its_functions():
    found = _metrics(UNMARKED / "pyg_gcn_train" / "run" / "nsys" / "profile.sqlite")
    assert found["sync_library_package"] == "torch_geometric"
    assert found["sync_library_sites"].startswith(
        "torch_geometric/utils/loop.py:650 add_remaining_self_loops"
    )


def test_a_loop_that_syncs_in_its_own_lines_names_no_library():
    found = _metrics(FIXTURES / "runs" / "h100-sync-cuda-synchronize" / "nsys" / "profile.sqlite")
    assert found["sync_sampled"] >= MIN_SYNC_SAMPLES
    assert "sync_library_package" not in found and "sync_library_pct" not in found


def test_another_threads_samples_do_not_place_the_syncs():
    """tqdm's monitor thread wakes while the encode loop's thread sits in its syncs: counted by time alone,
    half of those samples were tqdm's _monitor.run; only the syncing thread's count, and they are too few
    to place anything."""
    found = _metrics(UNMARKED / "sentence_transformers_encode" / "run" / "nsys" / "profile.sqlite")
    assert "sync_library_package" not in found


@pytest.mark.parametrize("name", ["torchvision_detection_eval", "pyg_gcn_train"])
def test_the_sync_finding_shows_where_the_host_sat(analyzed_copy, name):
    doc = analyzed_copy(UNMARKED / name / "run")
    finding = next(f for f in doc["diagnosis"]["bottlenecks"] if f["id"] == "sync.per_step")
    where = next(
        e for e in finding["evidence"] if e["label"] == "where the host sat in them, by share of the samples"
    )
    assert (
        where["source"] == "measured:nsys" and where["value"] == doc["metrics"]["sync_library_sites"]["value"]
    )


def test_source_a_library_generated_is_the_librarys_not_the_users():
    """torch_geometric imports each convolution's propagate from a file it writes to /tmp: its frames are
    the library's (their samples had been counted as the user's lines)."""
    generated = "/tmp/torch_geometric.nn.conv.gcn_conv_GCNConv_propagate_gey8jjc9.py"
    export = open_export(UNMARKED / "pyg_gcn_train" / "run" / "nsys" / "profile.sqlite")
    stacks: list = []
    read_python_samples(export, 0, 2**62, pick=lambda frames: stacks.append(frames) or None)
    assert any(frame[0] == generated for stack in stacks for frame in stack)
    assert library_package(generated) == "torch_geometric" and not is_user_file(generated)
    assert is_user_file("/home/me/train.v2.py")
