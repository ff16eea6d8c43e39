"""A script that marks its steps is stepped by its marks, even where a repeated forward comes first."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from hybrid_cli import inject_argv

from hybrid.inject.step_finder import script_marks_steps

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "marks_after_many_forwards.py"


def test_marks_in_the_source_are_calls_not_mentions(tmp_path):
    # _planted.mark_step(), a helper forwarding to hybrid's
    assert script_marks_steps(str(ROOT / "benchmarks/planted/launch_batch1_deep_mlp.py"))
    assert script_marks_steps(str(ROOT / "tests/scripts/mark_step_loop.py"))  # hybrid.step() and mark_step()
    assert not script_marks_steps(str(ROOT / "benchmarks/unmarked/hf_trainer_gpt2.py"))
    mentioned = tmp_path / "mentions.py"
    mentioned.write_text('# call hybrid.mark_step() here some day\nprint("hybrid.step()")\n')
    assert not script_marks_steps(str(mentioned))
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    assert not script_marks_steps(str(broken))  # unparsable: the detectors find its steps


def test_the_marked_step_is_the_step_though_a_forward_repeats_first(tmp_path):
    out = tmp_path / "plain"
    done = subprocess.run(
        inject_argv(out, "plain", str(SCRIPT), warmup=2, flags=["--fixed-warmup"]),
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    inject = json.loads((out / "inject.json").read_text())
    assert inject["step_source"] == "mark_step"
    assert inject["step_detection"] == {"off": "the script calls hybrid.mark_step() or hybrid.step()"}
    # One step is 32 requests of >= 2 ms each, not one request's forward.
    assert inject["step_time_ms"] > 32 * 2
