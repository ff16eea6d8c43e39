#!/usr/bin/env bash
# Does a collector that is loaded but idle slow the steps a window times? One built-in model (argv[1]), three
# processes, 20 plain steps each after warmup: a plain pass of its own; the plain window of a torch pass's
# process (before torch.profiler starts); the plain window of an nsys pass's process (nsys attached with
# --capture-range=cudaProfilerApi, before the injector's cudaProfilerStart opens the range). Prints the three
# step times; each process's inject.json is kept under OUT (argv[2]).
set -u
model=$1
out=$2
args=(--module -- hybrid.models "$model" --steps 80 --device cuda)
python3 -m hybrid.inject.script --pass plain --out "$out/separate" --warmup 5 --steps 20 "${args[@]}" > "$out/separate.log" 2>&1
python3 -m hybrid.inject.script --pass torch --out "$out/torch_window" --warmup 5 --steps 20 --plain-steps 20 "${args[@]}" \
  > "$out/torch_window.log" 2>&1
nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --capture-range=cudaProfilerApi --capture-range-end=stop \
  --export none -f true -o "$out/nsys_window/profile" \
  python3 -m hybrid.inject.script --pass nsys --out "$out/nsys_window" --warmup 5 --steps 20 --plain-steps 20 "${args[@]}" \
  > "$out/nsys_window.log" 2>&1
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for name in ("separate", "torch_window", "nsys_window"):
    inject = json.loads((out / name / "inject.json").read_text())
    window = inject.get("plain_window") or {}
    rows[name] = {"plain_step_ms": window.get("step_time_ms") if window else inject.get("step_time_ms"),
                  "collector_step_ms": inject.get("step_time_ms") if window else None,
                  "warmup_dropped": inject.get("warmup_dropped")}
(out / "idle.json").write_text(json.dumps(rows, indent=1))
print(json.dumps(rows, indent=1))
PY
