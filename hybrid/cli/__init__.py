"""The command line. Commands only parse options and call into the package; a HybridError becomes
its exit code here and nowhere else (docs/DESIGN.md: 0 done, 1 finding at/above --fail-on or a regression
past --fail-on-regression, 2 usage or unreadable input, 3 workload failed, 4 profiler failed, 5 the
regression gate cannot decide, 70 an internal error, 130 interrupted, 128 + N stopped by SIGTERM or
SIGHUP). One module per command (two for profiling), registered below in the order `hybrid --help` lists
them."""

from __future__ import annotations

import sys

from hybrid.cli import compare, doctor, profile, report
from hybrid.cli.app import app
from hybrid.cli.output import print_stderr
from hybrid.errors import HybridError

# `run` hands everything after the script to it: its options, and a torchrun launcher's.
app.command(context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})(profile.run)
app.command()(profile.diagnose)
app.command()(report.report)
app.command()(compare.compare)
app.command()(doctor.doctor)


def main() -> None:
    from hybrid.streams import finish_stdout, guard_streams

    guard_streams()
    try:
        app(prog_name="hybrid")
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    try:
        finish_stdout()
    except HybridError as error:  # stdout on a full disk: said, with its own exit code
        print_stderr(error.message())
        code = error.exit_code if code in (0, None) else code
    sys.exit(code)
