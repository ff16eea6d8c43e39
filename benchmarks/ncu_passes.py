"""What ncu's replay passes cost, per group of hybrid's metrics, and for the ncu pass on resnet50 b32
with the metric set and without the groups that cost the most. Runs on a GPU machine with ncu:

    python benchmarks/ncu_passes.py RESULTS.md --work DIR
        [--selected benchmarks/results/resnet50_b32_selected_kernels.json]
        [--repeats N] [--variant NAME ...] [--no-groups]

Part 1 profiles two small elementwise kernels once per metric group and reads how many replay passes
each group needs (`profiler__replayer_passes`). Part 2 runs the ncu pass exactly as `hybrid run` does
(measured window, one launch per launch configuration of the selected kernel names) on resnet50 b32,
once per metric set (N times, the sets taken in turn, with --repeats: one reading of each left the
profiled window following the passes only loosely, benchmarks/results/s27_h100), and records wall time,
launches and passes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nsight import ncu
from nsight import ncu_metrics as m
from nsight.ncu_csv import parse_ncu_csv

SMALL_TARGET = (
    "import torch; x = torch.ones(1 << 22, device='cuda'); torch.cuda.synchronize(); "
    "y = x * 2; torch.cuda.synchronize()"
)

GROUPS: dict[str, tuple[str, ...]] = {
    "duration": (m.DURATION,),
    "dram bytes": (m.DRAM_READ_BYTES, m.DRAM_WRITE_BYTES),
    "L2 bytes + hit rate": (m.L2_BYTES, m.L2_HIT_RATE),
    "L1 hit rate": (m.L1_HIT_RATE,),
    "scalar FLOPs (SASS op counts)": tuple(n for ops in m.SCALAR_FLOP_OPS.values() for n in ops),
    "tensor ops by precision": tuple(m.TENSOR_OPS_BY_PRECISION.values()),
    "tensor pipe": (m.TENSOR_PIPE,),
    "SM throughput": (m.SM_THROUGHPUT,),
    "memory throughput": (m.MEMORY_THROUGHPUT,),
    "occupancy": (m.ACHIEVED_OCCUPANCY, m.THEORETICAL_OCCUPANCY, *m.OCCUPANCY_LIMITS.values()),
    "global load sectors/requests": (m.GLOBAL_LOAD_SECTORS, m.GLOBAL_LOAD_REQUESTS),
    "SM clock": (m.SM_CLOCK,),
    "all (hybrid's set)": m.METRICS,
}

VARIANTS: dict[str, tuple[str, ...]] = {
    "hybrid's set": m.METRICS,
    "without SM/memory throughput": tuple(
        x for x in m.METRICS if x not in (m.SM_THROUGHPUT, m.MEMORY_THROUGHPUT)
    ),
    # Each throughput alone (session 2: together they cost 8 of the 15 passes, 9 and 6 alone): which one a
    # derived figure (memory throughput from the measured DRAM and L2 bytes against their peaks) would save.
    "without memory throughput": tuple(x for x in m.METRICS if x != m.MEMORY_THROUGHPUT),
    "without SM throughput": tuple(x for x in m.METRICS if x != m.SM_THROUGHPUT),
    "without scalar FLOPs": tuple(
        x for x in m.METRICS if x not in {n for ops in m.SCALAR_FLOP_OPS.values() for n in ops}
    ),
}

RESNET50 = [
    "-m",
    "hybrid.inject.script",
    "--pass",
    "ncu",
    "--warmup",
    "5",
    "--steps",
    "1",
    "--module",
    "--",
    "hybrid.models",
    "resnet50",
    "--steps",
    "15",
    "--precision",
    "fp32",
    "--device",
    "cuda",
    "--batch-size",
    "32",
]


def group_passes(found: Path, work: Path) -> list[tuple[str, int, int | None]]:
    rows = []
    for name, metrics in GROUPS.items():
        slug = name.split(" (")[0].replace(" ", "_").replace("/", "_").replace("+", "and")
        run = ncu.run_ncu(
            found,
            work / f"group_{slug}.csv",
            work / f"group_{slug}.log",
            [sys.executable, "-c", SMALL_TARGET],
            kernel_names=[],
            launch_count=2,
            metrics=metrics,
            env=dict(os.environ),
            timeout_s=300,
        )
        rows.append((name, len(metrics), parse_ncu_csv(run.csv_path).replay_passes))
    return rows


def resnet50_costs(
    found: Path, work: Path, selected: list[str], variants: list[str], repeats: int
) -> list[dict]:
    rows = []
    for repeat, name in ((r, n) for r in range(repeats) for n in variants):
        metrics = VARIANTS[name]
        slug = name.replace(" ", "_").replace("/", "_").replace("'", "")
        out = work / f"resnet50_{slug}_{repeat}"
        started = time.monotonic()
        run = ncu.run_ncu(
            found,
            out / "counters.csv",
            out / "ncu.log",
            [sys.executable, *RESNET50[:6], "--out", str(out), *RESNET50[6:]],
            kernel_names=selected,
            measured_window=True,
            one_per_config=True,
            metrics=metrics,
            env=dict(os.environ),
            timeout_s=600,
        )
        wall = time.monotonic() - started
        parsed = parse_ncu_csv(run.csv_path)
        inject = json.loads((out / "inject.json").read_text())
        rows.append(
            {
                "variant": name,
                "repeat": repeat + 1,
                "metrics": len(metrics),
                "launches": len(parsed.frame),
                "passes": parsed.replay_passes,
                "wall_s": round(wall, 1),
                "window_s": round(inject.get("window_ns", 0) / 1e9, 2),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument(
        "--selected",
        type=Path,
        default=Path(__file__).parent / "results" / "resnet50_b32_selected_kernels.json",
    )
    parser.add_argument("--repeats", type=int, default=1, help="readings of each metric set, taken in turn")
    parser.add_argument(
        "--variant", action="append", choices=list(VARIANTS), help="only these metric sets (default: all)"
    )
    parser.add_argument("--no-groups", action="store_true", help="skip the passes per metric group")
    args = parser.parse_args()
    found = ncu.find_ncu()
    if found is None:
        parser.error(f"ncu not found: put it on PATH or set {ncu.NCU_ENV}")
    args.work.mkdir(parents=True, exist_ok=True)
    lines = [
        "# ncu replay passes per metric group, and the ncu pass on resnet50 b32",
        "",
        (
            f"ncu {ncu.ncu_version(found)}; command: "
            f"`python benchmarks/ncu_passes.py {args.out} --work {args.work}`"
        ),
        "",
    ]
    if not args.no_groups:
        lines += ["| metric group | metrics | replay passes |", "|---|---|---|"]
        lines += [
            f"| {name} | {count} | {passes} |" for name, count, passes in group_passes(found, args.work)
        ]
        lines.append("")
    lines += [
        (
            "| resnet50 b32 ncu pass | reading | metrics | launches | passes/launch | wall (s) "
            "| profiled window (s) |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    selected = json.loads(args.selected.read_text())
    variants = args.variant or list(VARIANTS)
    lines += [
        f"| {r['variant']} | {r['repeat']} | {r['metrics']} | {r['launches']} | {r['passes']} "
        f"| {r['wall_s']} | {r['window_s']} |"
        for r in resnet50_costs(found, args.work, selected, variants, args.repeats)
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
