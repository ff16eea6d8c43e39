"""Peak figures per GPU model, so metrics can say "x% of what this chip can do".

Every figure is a device property, not a measurement of the run, so its source is `spec`: a
datasheet value, or, where a collector read it off the actual device (nsys `TARGET_INFO_GPU`: memory
bandwidth, SM count, clock, L2 size), the device's own reported value, which wins and is named in
`Peaks.notes` ("reported by the device"). `measured:*` stays for quantities measured during the run.
A GPU missing from the table gets no invented numbers: its peaks stay None and `Peaks.unknown`
lists them.

Tensor FLOP/s are *dense* (NVIDIA datasheets print the 2:4-sparse figure, twice as large, with an
asterisk; we halve those). FP32 and FP64 are the non-tensor CUDA-core rates; `fp64_tensor` is DMMA (a DGEMM
on Hopper runs there, at twice the FP64 rate) and `fp16_scalar` the non-tensor FP16 rate (HFMA2: twice FP32
on Ampere/Hopper, equal to it on Ada), so a kernel's measured FLOPs on each pipe meet that pipe's peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hybrid.profile import DeviceInfo
from hybrid.provenance import ESTIMATED, SPEC, Metric

TERA = 1e12
GIGA = 1e9
MIB = 1024 * 1024
PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp64_tensor", "fp16_scalar")

# One host link per direction. PCIe x16 theoretical per direction: Gen4 32 GB/s, Gen5 64 GB/s
# (PCI-SIG; NVIDIA datasheets print the bidirectional 64 / 128 GB/s).
PCIE_GEN4_X16 = 32 * GIGA
PCIE_GEN5_X16 = 64 * GIGA

# L2 bandwidth of the H200 (SXM, the part our captures ran on), as Nsight Compute 2025.3.1 models it for
# the device, read off `ncu --set full` on a resnet50 step (gpu-captures/models-call2/ncu_full_sample):
# lts__t_sectors.avg.peak_sustained = 3 sectors/cycle per L2 slice, 94 slices (lts__t_sectors.sum /
# .avg), 32 B per sector, at the highest L2 clock seen (lts__cycles_elapsed.avg.per_second, 1.7084 GHz):
# 3 x 94 x 32 B x 1.7084 GHz = 15.4 TB/s. It is the peak of lts__t_bytes, the metric our points' L2
# intensity divides by, and ncu's own pct_of_peak_sustained agrees (6.05 TB/s read as 39.31%). The same
# recipe gives DRAM dram__bytes.sum.peak_sustained 1504 B/cycle x 3.198 GHz = 4.81 TB/s, the bandwidth
# nsys reports for this device. No microbenchmark paper in reach gives an H200 figure (Luo et al. 2024
# measured an H800), and other GPUs' slice counts and L2 clocks differ, so they stay unknown.
H200_L2_BYTES_PER_S = 3 * 94 * 32 * 1.7084 * GIGA
H200_L2_REFERENCE = (
    "L2 peak from Nsight Compute 2025.3.1's model of an H200 (lts__t_sectors peak_sustained "
    "x 94 slices x L2 clock, ncu --set full): a device property, not measured in this run"
)


@dataclass(frozen=True)
class GpuSpec:
    model: str
    match: tuple[str, ...]  # all substrings (lower case) the device name must contain
    exclude: tuple[str, ...]  # none of these may appear (tells SXM from PCIe/NVL variants)
    dram_bytes_per_s: float
    flops_per_s: dict[str, float | None]  # None: the chip has no such path (A100 has no FP8)
    l2_bytes: int
    sm_count: int
    boost_clock_hz: float
    host_link_bytes_per_s: float
    reference: str
    # L2 bandwidth is in no NVIDIA datasheet: None unless a source is cited where the entry sets it.
    l2_bytes_per_s: float | None = None
    l2_reference: str | None = None


# Figures and where they come from; order matters (more specific entries first).
SPECS: tuple[GpuSpec, ...] = (
    # H200 NVL datasheet (NVIDIA H200 Tensor Core GPU datasheet, 2024): 4.8 TB/s HBM3e, FP64 30 TF,
    # FP64 Tensor 60, FP32 60 TF, TF32 835 / BF16-FP16 1671 / FP8 3341 TF sparse -> halved; non-tensor FP16
    # at 2x FP32 (Hopper whitepaper, table 2). SMs and L2 from GH100.
    GpuSpec(
        "H200 NVL",
        ("h200", "nvl"),
        (),
        4.8 * TERA,
        {
            "fp64": 30 * TERA,
            "fp32": 60 * TERA,
            "tf32": 417.5 * TERA,
            "fp16": 835.5 * TERA,
            "bf16": 835.5 * TERA,
            "fp8": 1670.5 * TERA,
            "fp64_tensor": 60 * TERA,
            "fp16_scalar": 120 * TERA,
        },
        50 * 1000 * 1000,
        132,
        1.785 * GIGA,
        PCIE_GEN5_X16,
        "NVIDIA H200 datasheet (NVL column)",
    ),
    # H200 SXM datasheet: 4.8 TB/s, FP64 34 TF, FP64 Tensor 67, FP32 67 TF, TF32 989 / BF16-FP16 1979 /
    # FP8 3958 TF sparse -> halved; non-tensor FP16 133.8 (Hopper whitepaper, H100 SXM5: the same GH100
    # configuration, 132 SMs, 1.98 GHz boost).
    GpuSpec(
        "H200 SXM",
        ("h200",),
        ("nvl",),
        4.8 * TERA,
        {
            "fp64": 34 * TERA,
            "fp32": 67 * TERA,
            "tf32": 494.7 * TERA,
            "fp16": 989.4 * TERA,
            "bf16": 989.4 * TERA,
            "fp8": 1978.9 * TERA,
            "fp64_tensor": 67 * TERA,
            "fp16_scalar": 133.8 * TERA,
        },
        50 * 1000 * 1000,
        132,
        1.98 * GIGA,
        PCIE_GEN5_X16,
        "NVIDIA H200 datasheet (SXM column)",
        H200_L2_BYTES_PER_S,
        H200_L2_REFERENCE,
    ),
    # H100 PCIe (H100 datasheet, PCIe column): 2.0 TB/s, FP64 26, FP64 Tensor 51, FP32 51, TF32 756 /
    # FP16 1513 / FP8 3026 TF sparse -> halved; non-tensor FP16 2x FP32; 114 SMs (Hopper whitepaper),
    # 1.755 GHz boost.
    GpuSpec(
        "H100 PCIe",
        ("h100", "pcie"),
        (),
        2.0 * TERA,
        {
            "fp64": 26 * TERA,
            "fp32": 51 * TERA,
            "tf32": 378 * TERA,
            "fp16": 756 * TERA,
            "bf16": 756 * TERA,
            "fp8": 1513 * TERA,
            "fp64_tensor": 51 * TERA,
            "fp16_scalar": 102 * TERA,
        },
        50 * 1000 * 1000,
        114,
        1.755 * GIGA,
        PCIE_GEN5_X16,
        "NVIDIA H100 datasheet (PCIe column)",
    ),
    # H100 SXM5 (H100 datasheet, SXM column): 3.35 TB/s, FP64 34, FP64 Tensor 67, FP32 67, TF32 989 /
    # FP16 1979 / FP8 3958 TF sparse -> halved; non-tensor FP16 133.8, 132 SMs, 50 MB L2 (Hopper
    # whitepaper), 1.98 GHz boost.
    GpuSpec(
        "H100 SXM",
        ("h100",),
        ("pcie", "nvl"),
        3.35 * TERA,
        {
            "fp64": 34 * TERA,
            "fp32": 67 * TERA,
            "tf32": 494.7 * TERA,
            "fp16": 989.4 * TERA,
            "bf16": 989.4 * TERA,
            "fp8": 1978.9 * TERA,
            "fp64_tensor": 67 * TERA,
            "fp16_scalar": 133.8 * TERA,
        },
        50 * 1000 * 1000,
        132,
        1.98 * GIGA,
        PCIE_GEN5_X16,
        "NVIDIA H100 datasheet (SXM column)",
    ),
    # A100 SXM4 80GB (A100 datasheet): 2039 GB/s HBM2e; FP64 9.7, FP64 Tensor 19.5, FP32 19.5, TF32 156 /
    # FP16 312 TF dense (datasheet lists 312 / 624 sparse); no FP8; non-tensor FP16 78 (A100 whitepaper).
    # 108 SMs, 40 MB L2, 1.41 GHz boost.
    GpuSpec(
        "A100 SXM 80GB",
        ("a100", "80gb"),
        ("pcie",),
        2039 * GIGA,
        {
            "fp64": 9.7 * TERA,
            "fp32": 19.5 * TERA,
            "tf32": 156 * TERA,
            "fp16": 312 * TERA,
            "bf16": 312 * TERA,
            "fp8": None,
            "fp64_tensor": 19.5 * TERA,
            "fp16_scalar": 78 * TERA,
        },
        40 * 1000 * 1000,
        108,
        1.41 * GIGA,
        PCIE_GEN4_X16,
        "NVIDIA A100 datasheet (80GB SXM)",
    ),
    # A100 SXM4 40GB: 1555 GB/s HBM2, otherwise as above (A100 datasheet, 40GB column).
    GpuSpec(
        "A100 SXM 40GB",
        ("a100",),
        ("pcie", "80gb"),
        1555 * GIGA,
        {
            "fp64": 9.7 * TERA,
            "fp32": 19.5 * TERA,
            "tf32": 156 * TERA,
            "fp16": 312 * TERA,
            "bf16": 312 * TERA,
            "fp8": None,
            "fp64_tensor": 19.5 * TERA,
            "fp16_scalar": 78 * TERA,
        },
        40 * 1000 * 1000,
        108,
        1.41 * GIGA,
        PCIE_GEN4_X16,
        "NVIDIA A100 datasheet (40GB SXM)",
    ),
    # L40S datasheet: 864 GB/s GDDR6, FP32 91.6 TF, TF32 366 / BF16-FP16 733 / FP8 1466 TF sparse ->
    # halved; FP64 is 1/64 of FP32 on Ada and non-tensor FP16 runs at the FP32 rate, no FP64 tensor path
    # (Ada whitepaper). 142 SMs, 96 MB L2, 2.52 GHz boost.
    GpuSpec(
        "L40S",
        ("l40s",),
        (),
        864 * GIGA,
        {
            "fp64": 91.6 * TERA / 64,
            "fp32": 91.6 * TERA,
            "tf32": 183 * TERA,
            "fp16": 366 * TERA,
            "bf16": 366 * TERA,
            "fp8": 733 * TERA,
            "fp64_tensor": None,
            "fp16_scalar": 91.6 * TERA,
        },
        96 * MIB,
        142,
        2.52 * GIGA,
        PCIE_GEN4_X16,
        "NVIDIA L40S datasheet; Ada whitepaper (FP64)",
    ),
    # L4 datasheet: 300 GB/s, FP32 30.3 TF, TF32 120 / FP16 242 / FP8 485 TF sparse -> halved;
    # FP64 1/64 of FP32, non-tensor FP16 at the FP32 rate (Ada whitepaper). 58 SMs, 48 MB L2, 2.04 GHz boost.
    GpuSpec(
        "L4",
        ("l4",),
        ("l40",),
        300 * GIGA,
        {
            "fp64": 30.3 * TERA / 64,
            "fp32": 30.3 * TERA,
            "tf32": 60 * TERA,
            "fp16": 121 * TERA,
            "bf16": 121 * TERA,
            "fp8": 242.5 * TERA,
            "fp64_tensor": None,
            "fp16_scalar": 30.3 * TERA,
        },
        48 * MIB,
        58,
        2.04 * GIGA,
        PCIE_GEN4_X16,
        "NVIDIA L4 datasheet; Ada whitepaper (FP64)",
    ),
    # RTX 4090 (Ada whitepaper, appendix): 1008 GB/s GDDR6X, FP32 82.6 TF, tensor FP16/BF16 with FP32
    # accumulate 165.2 TF dense (GeForce runs FP32-accumulate at half rate; PyTorch accumulates in
    # FP32), TF32 82.6 dense, FP8 (FP32 acc.) 330.3 dense, FP64 1.29 TF. 128 SMs, 72 MB L2.
    GpuSpec(
        "RTX 4090",
        ("4090",),
        (),
        1008 * GIGA,
        {
            "fp64": 1.29 * TERA,
            "fp32": 82.6 * TERA,
            "tf32": 82.6 * TERA,
            "fp16": 165.2 * TERA,
            "bf16": 165.2 * TERA,
            "fp8": 330.3 * TERA,
            "fp64_tensor": None,
            "fp16_scalar": 82.6 * TERA,
        },
        72 * MIB,
        128,
        2.52 * GIGA,
        PCIE_GEN4_X16,
        "NVIDIA Ada Lovelace whitepaper (RTX 4090)",
    ),
)

# Pinned copies over PCIe reach about this share of the link's theoretical rate (cudaMemcpy
# bandwidthTest: ~26 GB/s of 32 on Gen4 x16, ~53 GB/s of 64 on Gen5 x16). Used to estimate what a
# pinned copy would achieve; such values are labelled `estimated`.
PINNED_ACHIEVABLE_FRACTION = 0.8

# The export's figures differ from the table's by more than this before we rescale FLOP peaks.
RESCALE_TOLERANCE = 0.01


@dataclass
class Peaks:
    """Peaks of one device; a None figure is unknown (listed in `unknown`), never guessed."""

    model: str | None
    dram_bytes_per_s: Metric | None
    flops_per_s: dict[str, Metric | None]
    l2_bytes: Metric | None
    sm_count: Metric | None
    host_link_bytes_per_s: Metric | None
    l2_bytes_per_s: Metric | None = None
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def flops(self, precision: str) -> float | None:
        metric = self.flops_per_s.get(precision)
        return None if metric is None else float(metric.value)

    @property
    def dram(self) -> float | None:
        return None if self.dram_bytes_per_s is None else float(self.dram_bytes_per_s.value)

    @property
    def l2(self) -> float | None:
        return None if self.l2_bytes_per_s is None else float(self.l2_bytes_per_s.value)

    @property
    def pinned_copy_bytes_per_s(self) -> float | None:
        link = self.host_link_bytes_per_s
        return None if link is None else float(link.value) * PINNED_ACHIEVABLE_FRACTION

    def to_dict(self) -> dict:
        def plain(metric: Metric | None):
            return None if metric is None else metric.to_dict()

        return {
            "model": self.model,
            "dram_bytes_per_s": plain(self.dram_bytes_per_s),
            "flops_per_s": {k: plain(v) for k, v in self.flops_per_s.items()},
            "l2_bytes": plain(self.l2_bytes),
            "sm_count": plain(self.sm_count),
            "host_link_bytes_per_s": plain(self.host_link_bytes_per_s),
            "l2_bytes_per_s": plain(self.l2_bytes_per_s),
            "unknown": list(self.unknown),
            "notes": list(self.notes),
        }


def match_spec(name: str | None) -> GpuSpec | None:
    """The table entry for a device name such as 'NVIDIA H100 80GB HBM3', or None."""
    if not name:
        return None
    lowered = name.lower()
    for spec in SPECS:
        if all(m in lowered for m in spec.match) and not any(x in lowered for x in spec.exclude):
            return spec
    return None


def peaks_for(device: DeviceInfo) -> Peaks:
    """Peaks for `device`: datasheet figures for its model, overridden by what the export reported."""
    spec = match_spec(device.name)
    notes: list[str] = []
    reported = []

    dram = Metric(spec.dram_bytes_per_s, "B/s", SPEC) if spec else None
    if device.memory_bandwidth_bytes_per_s:
        dram = Metric(float(device.memory_bandwidth_bytes_per_s), "B/s", SPEC)
        reported.append("dram_bytes_per_s")
    sm_count = Metric(spec.sm_count, "SMs", SPEC) if spec else None
    if device.sm_count:
        sm_count = Metric(int(device.sm_count), "SMs", SPEC)
        reported.append("sm_count")
    l2 = Metric(spec.l2_bytes, "B", SPEC) if spec else None
    if device.l2_bytes:
        l2 = Metric(int(device.l2_bytes), "B", SPEC)
        reported.append("l2_bytes")
    if reported:
        notes.append(
            f"{', '.join(reported)} reported by the device (read by {device.source}), not measured in the run"
        )

    flops: dict[str, Metric | None] = {p: None for p in PRECISIONS}
    if spec:
        scale = 1.0
        if device.sm_count and device.sm_clock_hz:
            scale = (device.sm_count * device.sm_clock_hz) / (spec.sm_count * spec.boost_clock_hz)
        rescaled = abs(scale - 1.0) > RESCALE_TOLERANCE
        if rescaled:
            notes.append(
                f"FLOP/s peaks scaled by SM count x clock reported by the device "
                f"({device.sm_count} SMs at {device.sm_clock_hz / GIGA:.2f} GHz vs the "
                f"{spec.model} datasheet's {spec.sm_count} at {spec.boost_clock_hz / GIGA:.2f})"
            )
        for precision, value in spec.flops_per_s.items():
            if value is not None:
                # A rescaled datasheet value is our estimate, not the datasheet's.
                flops[precision] = Metric(value * scale, "FLOP/s", ESTIMATED if rescaled else SPEC)
        notes.append(f"peaks from {spec.reference}; tensor FLOP/s are dense (no 2:4 sparsity)")
    link = Metric(spec.host_link_bytes_per_s, "B/s", SPEC) if spec else None
    l2_bandwidth = Metric(spec.l2_bytes_per_s, "B/s", SPEC) if spec and spec.l2_bytes_per_s else None
    if l2_bandwidth is not None:
        notes.append(spec.l2_reference)

    figures = {
        "dram_bytes_per_s": dram,
        "sm_count": sm_count,
        "l2_bytes": l2,
        "host_link_bytes_per_s": link,
        "l2_bytes_per_s": l2_bandwidth,
    }
    unknown = [k for k, v in figures.items() if v is None]
    unknown += [
        f"flops_per_s.{p}" for p, v in flops.items() if v is None and not (spec and p in spec.flops_per_s)
    ]
    if spec is None and device.name:
        notes.append(f"no datasheet entry for {device.name!r}: peaks not reported by the device are unknown")
    return Peaks(spec.model if spec else None, dram, flops, l2, sm_count, link, l2_bandwidth, unknown, notes)
