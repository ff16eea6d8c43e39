"""hybrid.cuda_presence answers torch.cuda.is_available() without importing torch: checked against the
installed torch itself, in a process that imports it, and on version files as torch writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hybrid.cuda_presence import cuda_available, driver_device_count, torch_cuda_build

TORCH_SAYS = (
    "import json, torch; print(json.dumps({'cuda': torch.version.cuda, "
    "'available': torch.cuda.is_available(), 'count': torch.cuda.device_count()}))"
)


def _torch_facts() -> dict:
    done = subprocess.run([sys.executable, "-c", TORCH_SAYS], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_answer_is_torchs_own():
    facts = _torch_facts()
    assert torch_cuda_build() == facts["cuda"]
    assert cuda_available() is facts["available"]
    if facts["cuda"]:  # a CPU build reports no device whatever the driver sees
        assert driver_device_count() == facts["count"]


def test_the_build_is_read_from_the_version_file_without_running_it(tmp_path):
    # The two spellings torch's setup has written (typed since 2.0, untyped before), and a file that
    # would act if it ran.
    (tmp_path / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.11.0+cu128'\ncuda: Optional[str] = '12.8'\n"
    )
    assert torch_cuda_build(tmp_path) == "12.8"
    (tmp_path / "version.py").write_text("__version__ = '1.13.1+cpu'\ncuda = None\nhip = None\n")
    assert torch_cuda_build(tmp_path) is None
    marker = tmp_path / "ran"
    (tmp_path / "version.py").write_text(f"open({str(marker)!r}, 'w')\ncuda = '12.1'\n")
    assert torch_cuda_build(tmp_path) == "12.1" and not marker.exists()
    assert torch_cuda_build(tmp_path / "absent") is None


def test_diagnose_decides_its_device_without_importing_torch(tmp_path):
    """The CLI process imports torch only where the run is on the CPU (for the CPU sizes): a mistyped
    option answers before it, and on a GPU machine the workload's own processes import it."""
    probe = (
        "import sys\n"
        "from hybrid.cli import profile\n"
        "from hybrid.errors import UsageError\n"
        "try:\n"
        "    profile._check_cuda_present('cuda')\n"
        "except UsageError:\n"
        "    pass  # no CUDA device here\n"
        "print('torch' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=root)
    assert done.stdout.strip() == "False"
