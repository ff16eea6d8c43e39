"""examples/resnet50 is what this checkout's analyzer renders from the one committed capture it names
(examples/render.py, `make examples`), stamped with the version that rendered it, and the README's
"No GPU here?" walkthrough shows that same capture."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from hybrid import __version__

ROOT = Path(__file__).resolve().parent.parent
RENDER = ROOT / "examples" / "render.py"


def _render_module():
    spec = importlib.util.spec_from_file_location("examples_render", RENDER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _render_module()


def test_the_committed_example_is_what_the_analyzer_renders():
    done = subprocess.run(
        [sys.executable, str(RENDER), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_check_names_each_file_that_drifted_and_only_those(tmp_path):
    committed = tmp_path / "resnet50"
    shutil.copytree(render.EXAMPLE, committed)
    # Another machine's Python is no change of the analyzer.
    document = json.loads((committed / "results.json").read_text())
    python = document["tools"]["python"]
    document["tools"]["python"] = "3.10.0"
    (committed / "results.json").write_text(json.dumps(document))
    page = (committed / "report.html").read_text()
    assert f"python {python}," in page
    (committed / "report.html").write_text(page.replace(f"python {python},", "python 3.10.0,"))
    assert render.differences(render.EXAMPLE, committed) == []
    # A figure the analyzer renders otherwise is.
    lines = (committed / "report-default.txt").read_text().splitlines()
    lines[2] = lines[2].replace("Step 30.2 ms", "Step 31.0 ms")
    (committed / "report-default.txt").write_text("\n".join(lines) + "\n")
    document["timing"]["step_time_ms"] += 0.5
    (committed / "results.json").write_text(json.dumps(document))
    found = render.differences(render.EXAMPLE, committed)
    assert [line.split(":")[0] for line in found] == ["results.json", "report-default.txt"]
    assert "line 3 renders as 'Step 30.2 ms" in found[1]
    # So is the README's copy of the printed report.
    readme = (ROOT / "README.md").read_text()
    assert render.differences(render.EXAMPLE, render.EXAMPLE, readme) == []
    stale = readme.replace("\nStep 30.2 ms", "\nStep 31.0 ms", 1)
    assert stale != readme
    assert render.differences(render.EXAMPLE, render.EXAMPLE, stale) == [
        "README.md: its H200-EXAMPLE-OUTPUT block is not report-default.txt"
    ]


def test_the_example_is_stamped_with_the_analyzer_that_rendered_it():
    stamp = (render.EXAMPLE / render.STAMP).read_text()
    assert stamp.startswith(f"Rendered by hybrid {__version__} (git ")
    assert f"from the committed capture {render.CAPTURE}:" in stamp
    assert json.loads((render.EXAMPLE / "results.json").read_text())["tools"]["hybrid"] == __version__
    assert (ROOT / render.CAPTURE / "run.json").is_file()


def test_the_no_gpu_walkthrough_shows_the_one_capture_of_the_example():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## No GPU here?")[1].split("\n## ")[0]
    named = set(re.findall(r"tests/fixtures/runs/[\w.-]+", section))
    assert named == {render.CAPTURE}
    assert "examples/resnet50/results.json" in section
