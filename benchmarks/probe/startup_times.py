"""What a process start costs on the GPU machine before a workload's first step (issue 21): each command's
wall time in a fresh interpreter, printed as JSON. Run: python3 benchmarks/probe/startup_times.py"""

from __future__ import annotations

import json
import subprocess
import sys
import time

COMMANDS = {
    "python": ["-c", "pass"],
    "import torch": ["-c", "import torch"],
    "import torch + cuda.is_available()": ["-c", "import torch; torch.cuda.is_available()"],
    "import torch + torchvision": ["-c", "import torch, torchvision"],
    "import hybrid.cli.app": ["-c", "import hybrid.cli.app"],
    "import hybrid.pipeline": ["-c", "import hybrid.pipeline"],
    "resnet50, 1 step": ["-m", "hybrid.models", "resnet50", "--steps", "1", "--device", "cuda"],
    "resnet50, 50 steps": ["-m", "hybrid.models", "resnet50", "--steps", "50", "--device", "cuda"],
}
times = {}
for name, args in COMMANDS.items():
    start = time.monotonic()
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False)
    times[name] = {"s": round(time.monotonic() - start, 3), "rc": done.returncode}
print(json.dumps(times, indent=1))
