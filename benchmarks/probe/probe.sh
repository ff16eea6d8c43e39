#!/usr/bin/env bash
# One-call probe of the GPU machine's tools: versions, the nsys/ncu flags hybrid relies on, and how
# ncu's NVTX include filter matches our domain ranges. Output under $OUT/probe.txt.
set -u
o=${OUT:-/tmp}/probe.txt
{
echo "== versions"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nsys --version; ncu --version | tail -1
python3 -c "import torch,sys;print(sys.version);print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
which nsys ncu; ls /opt/nvidia/ 2>&1; ls /opt/nvidia/nsight-compute/ 2>&1
echo "== nsys profile --help (selected)"; nsys profile --help | grep -A3 -E -- "--(osrt-threshold|cuda-graph-trace|capture-range|capture-range-end|cudabacktrace|osrt-backtrace|sample|cpuctxsw|trace-fork-before-exec|export|cuda-memory-usage|nvtx-domain-include)" | head -120
echo "== ncu --help (nvtx/kernel filters)"; ncu --help | grep -B1 -A8 -E -- "--(nvtx-include|kernel-name |kernel-name-base|kernel-id|launch-count|target-processes|page|print-units|log-file|replay-mode|filter-mode)" | head -160
echo "== ncu nvtx filter probe (push/pop syntax)"
for f in 'hybrid@step 1/' 'hybrid@step 1' 'hybrid@"step 1"/'; do
  echo "-- filter: $f"; ncu --clock-control none --nvtx --nvtx-include "$f" --metrics gpu__time_duration.sum --csv python3 benchmarks/probe/nvtx_filter_probe.py 2>&1 | grep -E '^"[0-9]|PROF|WARN|ERR' | cut -c1-200 | head -8
done
echo "-- regex kernel name exclusion"
ncu --clock-control none --kernel-name 'regex:^(?!nccl).*' --metrics gpu__time_duration.sum --csv python3 benchmarks/probe/nvtx_filter_probe.py 2>&1 | grep -cE '^"[0-9]'
echo "== nsys quick capture with cudaProfilerApi"
} > "$o" 2>&1
cat "$o" | tail -c 11000
