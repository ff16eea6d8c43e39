"""`hybrid doctor`: what this machine has, and the mode `hybrid run` would use."""

from __future__ import annotations

import sys

from hybrid.cli.app import JsonOpt
from hybrid.cli.output import handles_errors


@handles_errors
def doctor(as_json: bool = JsonOpt) -> None:
    """Check Python, torch, CUDA, the GPU, nsys and ncu, and say which mode `hybrid run` would use."""
    from hybrid.doctor import diagnose_environment, render_doctor

    facts = diagnose_environment()
    if as_json:
        import json

        sys.stdout.write(json.dumps(facts, indent=1) + "\n")  # ensure_ascii: any terminal can carry it
    else:
        sys.stdout.write(render_doctor(facts))
