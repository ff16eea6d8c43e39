"""Multi-process (torchrun / DDP / FSDP) jobs: launch every pass under torchrun with the injector
wrapping each rank and keep one folder per rank (hybrid.pipeline.analyze_job merges the ranks' analyses
into one job result).

Run directory of a job:
    RUN/run.json                        command, plan, the job (nproc, launcher argv, ncu rank), passes
    RUN/<pass>/command.txt, console.log the torchrun command of each pass and every rank's output
    RUN/rank-00/torch/trace.json ...    each rank's artifacts, laid out as a single-process run dir
    RUN/rank-00/nsys/profile.sqlite     (nsys on every rank)
    RUN/rank-0K/ncu/counters.csv        (ncu on one rank only, K chosen below)
    RUN/results.json                    the job's results (pipeline.analyze_job)

Each rank's folder is a complete single-process run directory, so `hybrid report RUN/rank-01` and
`pipeline.analyze_run_dir` read it unchanged.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from hybrid.analysis.job_metrics import find_rank_dirs, job_block, load_rank_timeline, rank_dir_name
from hybrid.collect.orchestrate import Orchestrator, PassResult, Progress, RunOptions, Target
from hybrid.collect.torchrun_failures import read_torchrun_failures
from hybrid.errors import ProfilerError, UsageError, WorkloadError
from hybrid.inject.rank import RANK_DIR_PLACEHOLDER
from hybrid.rundir import RunDir

# What a rank raises when a peer died first (gloo's closed socket, NCCL's aborted communicator): the
# rank that raised something else, or failed first, is the cause.
PEER_FAILURE_MARKS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote worker",
    "NCCL communicator was aborted",
    "NCCL error",
    "Watchdog caught collective operation timeout",
)

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
LAUNCHER_NAMES = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def _quiet(_name: str, _event: str, _detail: str) -> None:
    return None


# -- launching -----------------------------------------------------------------------------------


def parse_torchrun_argv(argv: list[str]) -> tuple[list[str], Target, int | None]:
    """Split `torchrun [its flags] train.py [args]` (with or without the leading `torchrun` or
    `python -m torch.distributed.run`) into torchrun's own flags, the target, and nproc per node.
    Parsed with torchrun's own parser, so every flag it knows is understood as it would be."""
    from torch.distributed.run import get_args_parser

    args = list(argv)
    if args and Path(args[0]).name in LAUNCHER_NAMES:
        args = args[1:]
    elif (
        len(args) >= 3
        and Path(args[0]).name.startswith("python")
        and args[1] == "-m"
        and args[2] in LAUNCHER_NAMES
    ):
        args = args[3:]
    try:
        parsed = get_args_parser().parse_args(args)
    except SystemExit:
        raise UsageError(
            f"torchrun does not accept: {shlex.join(args)}",
            "check the torchrun flags (torchrun --help); the script comes after them",
        ) from None
    if parsed.no_python:
        raise UsageError(
            "torchrun --no-python runs a program hybrid cannot inject into",
            "launch a Python script or module (-m) so hybrid can mark its steps",
        )
    flags = args[: len(args) - 1 - len(parsed.training_script_args)]
    # torchrun's own -m applies to the training script; hybrid passes it on as the injector's --module.
    flags = [f for f in flags if f not in ("-m", "--module")]
    nproc = parsed.nproc_per_node
    return (
        flags,
        Target([parsed.training_script, *parsed.training_script_args], is_module=parsed.module),
        int(nproc) if str(nproc).isdigit() else None,
    )


class JobRunDir(RunDir):
    """A job's run directory. `read_inject(pass)` answers for the whole job: the lowest rank's
    inject.json, with every rank's outcome under `ranks`, so the orchestrator's checks see the job."""

    def rank_dirs(self) -> dict[int, Path]:
        return find_rank_dirs(self.path)

    def rank_injects(self, name: str) -> dict[int, dict | None]:
        return {rank: RunDir(folder).read_inject(name) for rank, folder in self.rank_dirs().items()}

    def read_inject(self, name: str) -> dict | None:
        injects = {r: i for r, i in self.rank_injects(name).items() if i}
        if not injects:
            return None
        first = dict(injects[min(injects)])
        first["ranks"] = {
            str(r): {k: i.get(k) for k in ("outcome", "exit_code", "measured_steps", "step_time_ms")}
            for r, i in injects.items()
        }
        return first


class JobOrchestrator(Orchestrator):
    """The single-process orchestrator's passes, each launched under torchrun."""

    def __init__(
        self,
        target: Target,
        options: RunOptions,
        *,
        nproc: int | None,
        launcher_flags: list[str],
        progress: Progress = _quiet,
    ) -> None:
        super().__init__(target, options, progress)
        self.run_dir = JobRunDir(self.run_dir.path)
        self.nproc = nproc
        self.launcher_flags = launcher_flags
        self.ncu_rank: int | None = None

    def launcher_argv(self) -> list[str]:
        flags = list(self.launcher_flags)
        if self.nproc is not None and not any(
            f.startswith(("--nproc-per-node", "--nproc_per_node")) for f in flags
        ):
            flags += ["--nproc-per-node", str(self.nproc)]
        if not any(f.startswith(("--rdzv", "--master", "--standalone", "--nnodes")) for f in flags):
            # One node and no rendezvous given: a free port, so two jobs on one machine never collide.
            flags.append("--standalone")
        return TORCHRUN + flags

    def inject_argv(
        self, pass_name: str, *, steps: int, whole_run: bool, wrap: Path | None = None
    ) -> list[str]:
        argv = self.launcher_argv() + [
            "-m",
            "hybrid.inject.rank",
            "--run-dir",
            str(self.run_dir.path),
            "--pass",
            pass_name,
        ]
        if wrap is not None:
            argv += ["--wrap-json", str(wrap)]
        # Ranks step in lockstep through their collectives: a warmup that each rank ends when its own
        # step times settle would stop them at different steps, one rank waiting on a peer that left.
        return argv + [
            "--",
            "--fixed-warmup",
            *self.inject_flags(pass_name, steps=steps, whole_run=whole_run),
        ]

    def _check_steps_agree(self, name: str) -> None:
        steps = {r: (i or {}).get("measured_steps") for r, i in self.run_dir.rank_injects(name).items()}
        if len(set(steps.values())) > 1:
            self.mode_reasons.append(
                f"ranks measured different numbers of steps in the {name} pass ("
                + ", ".join(f"rank {r}: {n}" for r, n in steps.items())
                + "); job figures use the steps each rank has"
            )

    def _workload_failure(self, result: PassResult) -> WorkloadError | None:
        """A rank raised or died: exit 3, naming the rank that failed first and keeping every folder."""
        injects = self.run_dir.rank_injects(result.name)
        failed = {
            r: i
            for r, i in injects.items()
            if i and (i.get("outcome") == "exception" or i.get("exit_code") not in (0, None))
        }
        silent = [r for r, i in injects.items() if i is None] if result.returncode not in (0, None) else []
        if not failed and not silent:
            self._check_steps_agree(result.name)
            return None
        torchrun = read_torchrun_failures(self.run_dir.path / result.name / "console.log")
        lines = [
            f"rank {r}: {i.get('outcome')} (exit status {i.get('exit_code')})"
            for r, i in sorted(failed.items())
        ]
        lines += [
            f"rank {r}: ended without a report ("
            + (torchrun.ranks[r].describe() if r in torchrun.ranks else "killed, or crashed outside Python")
            + ")"
            for r in silent
        ]
        cause = f"the workload failed in the {result.name} pass of the {len(injects)}-rank job: " + "; ".join(
            lines
        )
        first = self._first_failure(result.name, failed, silent, torchrun.root_cause)
        tb = (failed[first].get("traceback") or "").strip() if first in failed else ""
        how = f" ({torchrun.ranks[first].describe()})" if first in silent and first in torchrun.ranks else ""
        cause += f"\nrank {first} failed first{how}" + (f":\n{tb}" if tb else "")
        return WorkloadError(
            cause,
            "fix the script so it runs under torchrun on its own: torchrun "
            f"{shlex.join(self.launcher_argv()[len(TORCHRUN) :])} {self.target.display}",
            kept=", ".join(str(p) for p in self.run_dir.rank_dirs().values()) or str(self.run_dir.path),
        )

    def _first_failure(
        self, name: str, failed: dict[int, dict], silent: list[int], root_cause: int | None
    ) -> int:
        """The rank whose failure is not a peer's fault. A rank that raised its own error comes first
        (earliest report first); then a rank that died without a report (torchrun's root cause first),
        since the ranks that raised on its closed socket or were stopped by torchrun followed it; then
        the others."""

        def key(rank: int) -> tuple[int, float, int]:
            if rank in silent:
                return 1, 0.0 if rank == root_cause else 1.0, rank
            report = failed[rank]
            collateral = report.get("outcome") == "interrupted" or any(
                mark in (report.get("traceback") or "") for mark in PEER_FAILURE_MARKS
            )
            inject = self.run_dir.path / rank_dir_name(rank) / name / "inject.json"
            return 2 if collateral else 0, inject.stat().st_mtime if inject.exists() else float("inf"), rank

        return min([*failed, *silent], key=key)

    def _write_wrap(self, name: str, ranks: str | list[int], argv: list[str]) -> Path:
        return self.run_dir.write_text(
            f"{name}/wrap.json", json.dumps({"ranks": ranks, "argv": argv}, indent=1)
        )

    def _nsys_pass(self, tools: dict, stepless: bool, preload: bool = False) -> None:
        """Every rank's nsys pass; `preload` is the single process's (a job's traces are read with it)."""
        from hybrid.collect import nsys_tool as nsys

        out_base = Path(RANK_DIR_PLACEHOLDER) / "nsys" / "profile"
        prefix = nsys.build_nsys_command(Path(tools["nsys"]), out_base, [], capture_range=not stepless)
        wrap = self._write_wrap("nsys", "all", prefix)
        result = self._run_child(
            "nsys",
            self.inject_argv("nsys", steps=self.options.steps, whole_run=self.options.whole_run, wrap=wrap),
        )
        self._record(result)
        failure = self._workload_failure(result)
        if failure is not None:
            raise failure
        log = (self.run_dir.pass_dir("nsys") / "console.log").read_text(errors="replace")
        try:
            for folder in self.run_dir.rank_dirs().values():
                nsys.check_export(folder / "nsys" / "profile", result.returncode, log)
        except ProfilerError as error:
            self._collector_failed("nsys", error)

    def choose_ncu_rank(self) -> tuple[int, str]:
        """The straggler found in the nsys pass, whose kernels gate every step of the job; else the
        lowest rank, as DDP ranks run the same kernels."""
        timelines = [t for t in (load_rank_timeline(r, f) for r, f in self.run_dir.rank_dirs().items()) if t]
        ranks = sorted(t.rank for t in timelines)
        if len(timelines) > 1:
            block, _ = job_block(timelines, {r: {} for r in ranks})
            late = block.get("straggler")
            if late and late["lateness_ms"] > 0:
                return late["rank"], (
                    f"rank {late['rank']} is the straggler in the nsys pass "
                    f"(the others wait {late['lateness_ms']:.2f} ms a step for it)"
                )
        return (ranks[0] if ranks else 0), "no straggler in the nsys pass: every rank runs the same kernels"

    def _ncu_pass(self, tools: dict, stepless: bool) -> None:
        from hybrid.collect import ncu_tool as ncu
        from hybrid.load.ncu_match import select_kernels
        from hybrid.load.nsys_export import load_nsys_export
        from nsight import ncu_metrics

        rank, reason = self.choose_ncu_rank()
        self.ncu_rank = rank
        self.run_dir.update_run_json(
            job={**self.run_dir.run_json().get("job", {}), "ncu_rank": rank, "ncu_rank_reason": reason}
        )
        export = RunDir(self.run_dir.path / rank_dir_name(rank)).nsys_export()
        kernels = load_nsys_export(export).kernels if export else None
        names = (
            select_kernels(kernels, coverage=self.options.ncu_coverage, cap=self.options.ncu_kernels)
            if kernels is not None
            else []
        )
        if not names:
            self._collector_failed(
                "ncu",
                ProfilerError(
                    f"rank {rank}'s nsys pass captured no kernels to replay",
                    "check that every rank launches CUDA kernels in its steps",
                ),
            )
            return
        prefix = ncu.build_ncu_command(
            Path(tools["ncu"]),
            Path(RANK_DIR_PLACEHOLDER) / "ncu" / ncu.REPORT_NAME,
            [],
            kernel_names=names,
            measured_window=not stepless,
            metrics=ncu_metrics.METRICS,
            one_per_config=True,
        )
        wrap = self._write_wrap("ncu", [rank], prefix)
        # The other ranks run the same single step unprofiled: they must meet rank K in its collectives.
        result = self._run_child(
            "ncu",
            self.inject_argv("ncu", steps=1, whole_run=stepless, wrap=wrap),
            note=f"rank {rank} only ({reason}); NCCL kernels are not replayed",
        )
        self._record(result)
        failure = self._workload_failure(result)
        if failure is not None:
            raise failure
        folder = self.run_dir.path / rank_dir_name(rank) / "ncu"
        try:
            console = (self.run_dir.pass_dir("ncu") / "console.log").read_text(errors="replace")
            if ncu.finish_pass(
                Path(tools["ncu"]),
                folder / ncu.REPORT_NAME,
                folder / "counters.csv",
                folder / "ncu.log",
                result.returncode,
                console,
            ):
                self.mode_reasons.append("ncu stopped early: counters cover only the kernels it profiled")
        except ProfilerError as error:
            self._collector_failed("ncu", error)


def run_job(
    target_argv: list[str] | None,
    options: RunOptions,
    nproc: int | None,
    torchrun_argv: list[str] | None,
    progress: Progress = _quiet,
) -> Path:
    """Profile a torchrun job: `hybrid run --nproc-per-node N train.py ...` (target_argv and nproc)
    or `hybrid run -- torchrun ... train.py ...` (torchrun_argv). Returns the run directory.
    Raises WorkloadError (exit 3) when a rank fails; the other ranks' folders are kept."""
    if torchrun_argv:
        flags, target, nproc_given = parse_torchrun_argv(torchrun_argv)
        nproc = nproc if nproc is not None else nproc_given
    elif target_argv:
        flags, target = [], Target(list(target_argv))
        if nproc is None or nproc < 1:
            raise UsageError(
                f"--nproc-per-node must be at least 1 (got {nproc})", "pass --nproc-per-node 2, for example"
            )
    else:
        raise UsageError("no script to launch", "pass a script, or `-- torchrun [flags] train.py [args]`")
    orchestrator = JobOrchestrator(target, options, nproc=nproc, launcher_flags=flags, progress=progress)
    orchestrator.run_dir.update_run_json(
        job={
            "nproc_per_node": nproc,
            "launcher": orchestrator.launcher_argv(),
            "torchrun_argv": torchrun_argv,
        }
    )
    orchestrator.run()
    return orchestrator.run_dir.path
