"""The per-rank program of a multi-process job: torchrun starts one of these per rank.

    python -m hybrid.inject.rank --run-dir RUN --pass P [--wrap-json FILE]
        -- INJECT_OPTIONS -- TARGET [ARGS...]

It reads the rank torchrun gave it (RANK, else LOCAL_RANK) and runs the injector with
`--out RUN/rank-XX/P`, so every rank leaves its own inject.json and trace. With --wrap-json, the
ranks it names run the injector under a collector instead (nsys on every rank, ncu on one): the file
holds {"ranks": "all" | [int, ...], "argv": [...]} where "{rank_dir}" in argv is this rank's folder.

A SIGTERM (how torchrun stops the surviving ranks when one fails) is turned into KeyboardInterrupt,
so the injector still writes inject.json and the trace of the steps done so far.

Standard library only (and hybrid.inject.script, hybrid.markers): it runs in every rank before the
user's code.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from hybrid.markers import RANK_DIR_FORMAT

RANK_DIR_PLACEHOLDER = "{rank_dir}"


def rank_from_env(env: dict[str, str] | None = None) -> int:
    """The global rank torchrun set (RANK), else the local one; 0 for a plain single process."""
    env = os.environ if env is None else env
    for name in ("RANK", "LOCAL_RANK"):
        value = env.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return 0


def rank_dir(run_dir: Path, rank: int) -> Path:
    return run_dir / RANK_DIR_FORMAT.format(rank)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hybrid.inject.rank")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--pass", dest="pass_name", required=True)
    parser.add_argument("--wrap-json", type=Path, help="collector command for some ranks (see module doc)")
    return parser


def _wrap_for(wrap_json: Path | None, rank: int, folder: Path) -> list[str]:
    if wrap_json is None:
        return []
    wrap = json.loads(wrap_json.read_text())
    if wrap["ranks"] != "all" and rank not in wrap["ranks"]:
        return []
    return [arg.replace(RANK_DIR_PLACEHOLDER, str(folder)) for arg in wrap["argv"]]


def _raise_interrupt(_signum: int, _frame: FrameType | None) -> None:
    from hybrid.inject.stepping import active_session

    # Once only: a second signal must not cut the report short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    session = active_session()
    if session is not None and session.finishing:
        # Already writing the trace and inject.json (the script ended, e.g. raising on a peer's crash):
        # let it finish; torchrun waits for the rank before it escalates to SIGKILL.
        return
    raise KeyboardInterrupt


def _run_injector(inject_argv: list[str]) -> int:
    from hybrid.inject.script import main as inject_main
    from hybrid.inject.stepping import EXIT_INTERRUPTED, INTERRUPTED, active_session

    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return inject_main(inject_argv)
    except KeyboardInterrupt:
        # The launcher stopped this rank after its script had ended (typically raising on a peer's
        # crash), while the injector was writing its report: write it now, without that traceback.
        session = active_session()
        if session is not None:
            session.warnings.append(
                "stopped by the launcher (SIGTERM) while writing this report; how the "
                "script ended before that is not known"
            )
            session.finish(INTERRUPTED, EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print("error: no injector options and target after `--`", file=sys.stderr)
        return 2
    cut = argv.index("--")
    args = _parser().parse_args(argv[:cut])
    inject_args = argv[cut + 1 :]
    rank = rank_from_env()
    folder = rank_dir(args.run_dir, rank)
    out = folder / args.pass_name
    out.mkdir(parents=True, exist_ok=True)
    inject_argv = ["--pass", args.pass_name, "--out", str(out), *inject_args]
    collector = _wrap_for(args.wrap_json, rank, folder)
    if not collector:
        return _run_injector(inject_argv)
    child = subprocess.Popen([*collector, sys.executable, "-m", "hybrid.inject.script", *inject_argv])
    # torchrun stops a failed job with SIGTERM: pass it on, so the collector can close its report.
    signal.signal(signal.SIGTERM, lambda signum, _frame: child.send_signal(signum))
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
