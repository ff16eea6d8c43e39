from pathlib import Path

import pytest

from hybrid.hardware import PRECISIONS, match_spec, peaks_for
from hybrid.load.nsys_export import load_nsys_export
from hybrid.profile import DeviceInfo
from hybrid.provenance import ESTIMATED, MEASURED_NSYS, SPEC

NSYS = Path(__file__).parent / "fixtures" / "h200-probe" / "nsys_matmul_copy.sqlite"


@pytest.mark.parametrize(
    "name, model",
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ],
)
def test_device_names_match_their_datasheet_entry(name, model):
    assert match_spec(name).model == model


def test_h200_export_overrides_datasheet_and_says_so():
    device = load_nsys_export(NSYS).device
    peaks = peaks_for(device)
    assert peaks.model == "H200 SXM"
    # TARGET_INFO_GPU of the capture: 4.814 TB/s, 132 SMs, 60 MiB L2 (the datasheet says 4.8 TB/s, 50 MB).
    assert peaks.dram_bytes_per_s.value == pytest.approx(4_814_304_000_000)
    # Device properties, not measurements of the run: `spec`, with a note that the device reported them.
    assert peaks.dram_bytes_per_s.source == SPEC
    assert peaks.l2_bytes.value == 62914560 and peaks.l2_bytes.source == SPEC
    assert peaks.sm_count.source == SPEC
    assert any(
        "dram_bytes_per_s, sm_count, l2_bytes reported by the device (read by measured:nsys)" in note
        for note in peaks.notes
    )
    # 132 SMs at 1.98 GHz is the datasheet configuration: FLOP peaks stay datasheet values.
    assert peaks.flops_per_s["bf16"].source == SPEC
    assert peaks.flops("bf16") == pytest.approx(989.4e12)  # dense: half the datasheet's 1979 sparse
    assert peaks.unknown == []


def test_different_sm_count_rescales_flop_peaks_as_an_estimate():
    peaks = peaks_for(
        DeviceInfo(name="NVIDIA H100 80GB HBM3", sm_count=114, sm_clock_hz=1.98e9, source=MEASURED_NSYS)
    )
    assert peaks.flops("fp32") == pytest.approx(67e12 * 114 / 132)
    assert peaks.flops_per_s["fp32"].source == ESTIMATED
    assert any("scaled" in note for note in peaks.notes)


def test_a100_has_no_fp8_path_and_that_is_not_unknown():
    peaks = peaks_for(DeviceInfo(name="NVIDIA A100-SXM4-80GB"))
    assert peaks.flops("fp8") is None
    assert "flops_per_s.fp8" not in peaks.unknown
    assert peaks.dram == pytest.approx(2039e9)


def test_unknown_gpu_lists_its_unknown_peaks_instead_of_guessing():
    peaks = peaks_for(DeviceInfo(name="Tesla T4", sm_count=40, source=MEASURED_NSYS))
    assert peaks.model is None
    assert peaks.dram is None and peaks.host_link_bytes_per_s is None
    assert peaks.sm_count.value == 40  # what the device reported is still used
    assert "dram_bytes_per_s" in peaks.unknown
    assert all(f"flops_per_s.{p}" in peaks.unknown for p in PRECISIONS)
    assert any("Tesla T4" in note for note in peaks.notes)


def test_l2_bandwidth_is_known_only_where_a_source_is_cited():
    h200 = peaks_for(load_nsys_export(NSYS).device)
    # Nsight Compute's model of the H200: 3 sectors/cycle x 94 slices x 32 B at the 1.7084 GHz L2 clock.
    assert h200.l2 == pytest.approx(15.4166e12, rel=1e-4)
    assert h200.l2_bytes_per_s.source == SPEC
    assert any("L2 peak from Nsight Compute" in note for note in h200.notes)
    assert h200.to_dict()["l2_bytes_per_s"]["value"] == h200.l2
    for name in ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200 NVL", "NVIDIA L4"):
        peaks = peaks_for(DeviceInfo(name=name))
        assert peaks.l2 is None and "l2_bytes_per_s" in peaks.unknown


def test_an_unknown_l2_peak_is_a_limitation_only_where_counters_measured_l2_bytes():
    """The Lightning run on an H100 (no L2 peak in reach) skipped ncu: no figure reads L2 bytes against the
    peak, so no 'Unknown peaks' limitation; its results still list the peak as unknown."""
    from hybrid.pipeline import analyze_run_dir

    run = Path(__file__).parent / "fixtures/unmarked_runs/lightning_bf16_transformer/run"
    results = analyze_run_dir(run)
    assert results["device"]["name"] == "NVIDIA H100 80GB HBM3"
    assert results["device"]["peaks"]["unknown"] == ["l2_bytes_per_s"]
    assert not any(text.startswith("Unknown peaks") for text in results["limitations"])
