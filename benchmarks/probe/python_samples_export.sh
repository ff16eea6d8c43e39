#!/usr/bin/env bash
# Where nsys puts Python samples: `nsys profile --export sqlite` leaves NVTX_EVENTS.binaryData NULL for
# the "Python Periodic Sampling" marks (call A); this checks `nsys export --include-blobs=true`.
# Usage: python_samples_export.sh OUT_DIR   (needs nsys and a CUDA torch; ~30 s)
set -u
out=$1; mkdir -p "$out"
nsys export --help > "$out/nsys_export_help.txt" 2>&1
nsys profile -t cuda,nvtx -s none --cpuctxsw=none --python-sampling=true --python-sampling-frequency=1000 \
  -f true -o "$out/p" python3 -c "
import torch
x = torch.ones(2048, 2048, device='cuda')
total = 0.0
for _ in range(300):
    total += (x @ x).sum().item()
" > "$out/profile.log" 2>&1
for blobs in true false; do
  nsys export --type sqlite --include-blobs=$blobs --force-overwrite=true -o "$out/p_blobs_$blobs.sqlite" \
    "$out/p.nsys-rep" > "$out/export_$blobs.log" 2>&1; echo "export include-blobs=$blobs rc=$?"
done
python3 - "$out" <<'PY'
import sqlite3, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("p_blobs_*.sqlite")):
    c = sqlite3.connect(path)
    rows = c.execute("SELECT typeof(binaryData), count(*), max(length(binaryData)) FROM NVTX_EVENTS "
                     "WHERE eventType = 34 GROUP BY 1").fetchall()
    first = c.execute("SELECT binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND binaryData IS NOT NULL "
                      "LIMIT 1").fetchone()
    print(path.name, rows, repr(first[0][:96]) if first else None)
PY
ls -la "$out"
