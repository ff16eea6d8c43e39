"""One analysis pipeline for fresh runs, saved run directories and foreign exports alike:
artifacts -> Profile (merged from the passes that ran) -> analyze -> the results.json document."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path

from hybrid import __version__, step_test
from hybrid.analysis.collectives import step_collectives
from hybrid.analysis.diagnosis import Analyzed, Diagnosis
from hybrid.analysis.job_metrics import find_rank_dirs, job_block, load_rank_timeline, rank_dir_name
from hybrid.analysis.verified import verified_fixes
from hybrid.errors import InputError, OutputError, UsageError
from hybrid.profile import MEASURED_MATCHES, STEP_COLUMNS, Profile
from hybrid.replay.overlap import job_overlap, overlap_metrics
from hybrid.replay.realized import read_snapshot
from hybrid.rules.advice import RunConfig, config_of, observed_config
from hybrid.rules.base import Finding
from hybrid.rundir import RunDir
from hybrid.schema import SCHEMA_VERSION

# Frames the nsys export measures better than torch.profiler; the torch pass keeps `ops` (names,
# shapes, dtypes, FLOP estimates) which nsys cannot see.
NSYS_FRAMES = ("steps", "kernels", "memcpys", "memsets", "syncs", "launches", "layers", "api_calls")
# A step after the rules: it reads what the analysis built and changes the diagnosis in place.
Stage = Callable[[Diagnosis, Analyzed], None]


def _no_kernels(export: Path, profile: Profile) -> InputError:
    reason = profile.extras.get("nsys", {}).get("no_kernels_reason") or "no CUDA kernel was recorded"
    return InputError(
        f"{export} holds no kernels: {reason}",
        "profile the steps that launch GPU work (nsys profile -t cuda ...; with "
        "--capture-range, make sure the range opens), then export again",
    )


def merge(torch_profile: Profile | None, nsys_profile: Profile | None) -> Profile:
    if nsys_profile is None:
        if torch_profile is None:
            raise InputError(
                "no torch trace and no nsys export to analyze",
                "pass a run directory written by `hybrid run`, or an nsys .sqlite export",
            )
        return torch_profile
    if torch_profile is None:
        return nsys_profile
    from hybrid.analysis.metrics import OPS_CLOCK_STEP_NS
    from hybrid.analysis.steps import steady_steps, step_windows

    torch_steps = steady_steps(torch_profile)
    merged = nsys_profile
    merged.ops = torch_profile.ops
    merged.ops_clock_steps = step_windows(torch_profile)[list(STEP_COLUMNS)]
    merged.op_callsites = torch_profile.op_callsites
    merged.sources["ops"] = torch_profile.sources.get("ops", "measured:torch")
    merged.extras = {**torch_profile.extras, **nsys_profile.extras}
    if len(torch_steps):
        # The ops were timed under torch.profiler, whose steps run at another pace than nsys's.
        merged.extras[OPS_CLOCK_STEP_NS] = float(torch_steps["dur_ns"].mean())
    merged.warnings = torch_profile.warnings + nsys_profile.warnings
    if not merged.device.name:
        merged.device = torch_profile.device
    return merged


def _attach_ncu(profile: Profile, csv_path: Path) -> Profile:
    """The profile with the CSV's counters attached. Raises InputError when the CSV cannot be read,
    or when its kernels are none of the profile's (counters of another workload, which would show as
    `measured (ncu)` over nothing)."""
    from hybrid.load.ncu_match import attach_counters, read_counters

    counters = read_counters(csv_path)
    attached = attach_counters(profile, counters)
    matched = int(attached.kernel_counters["counter_match"].isin(MEASURED_MATCHES).sum())
    if len(counters.frame) and matched == 0:
        raise InputError(
            f"{csv_path}: none of its {len(counters.frame)} kernel(s) is a kernel of this profile "
            "(no kernel name with the same grid and block): the counters come from another workload",
            "pass the CSV ncu measured on this workload, or leave --ncu out",
        )
    # What the reader noticed (metrics missing or n/a, rows skipped, units not understood) is said.
    attached.warnings += [f"{csv_path.name}: {note}" for note in counters.notes]
    return attached


def _inject_facts(run: RunDir, notes: list[str] | None = None) -> dict:
    """Facts the injector recorded in the process (peak memory, graph breaks, batch size); the torch
    pass is preferred since it ran the full measured window. A damaged inject.json is skipped and said."""
    for name in ("torch", "nsys", "plain", "ncu"):
        if notes is not None and run.inject_damaged(name):
            notes.append(
                f"{run.path / name / 'inject.json'} cannot be read as a JSON object: the facts "
                "it records (batch size, peak memory, configuration) are left out"
            )
    for name in ("torch", "nsys", "plain", "ncu"):
        inject = run.read_inject(name)
        if inject:
            return inject
    return {}


def step_fields(profile: Profile, inject: dict | None = None) -> dict:
    """workload.step_source, step_unit, step_confidence, step_reason (and where the step ranges were
    read, step_ranges): the injector's own account when the ranges are its marks, else the loader's
    (periodicity, steady window, NVTX pattern in a bare export)."""
    ours = profile.step_source in ("nvtx:hybrid", "torch:annotation")
    if ours and inject and inject.get("step_source") not in (None, "none"):
        fields = {
            key: inject.get(key) for key in ("step_source", "step_unit", "step_confidence", "step_reason")
        }
    else:
        fields = {
            "step_source": profile.step_source,
            "step_unit": profile.step_unit,
            "step_confidence": profile.step_confidence,
            "step_reason": profile.step_reason,
        }
    fields["step_ranges"] = profile.step_source
    return fields


def _warmup_dropped(profile: Profile, stepped: dict, facts: dict) -> int | None:
    """Warmup steps dropped before the measured ones; None where the steps were found in the export
    (their reason says what was dropped)."""
    if stepped.get("warmup_dropped") is not None:
        return stepped["warmup_dropped"]
    return facts.get("warmup_steps") if profile.step_source in ("nvtx:hybrid", "torch:annotation") else None


def _step_inject(run: RunDir, profile: Profile) -> dict:
    """The inject.json of the pass whose step ranges the profile uses."""
    preferred = {"nvtx:hybrid": ("nsys", "torch"), "torch:annotation": ("torch", "nsys")}.get(
        profile.step_source, ()
    )
    for name in preferred:
        inject = run.read_inject(name)
        if inject:
            return inject
    return {}


def _mode(profile: Profile, facts: dict) -> str:
    if len(profile.counters):
        return "hybrid"
    if profile.sources.get("kernels") == "measured:nsys":
        return "nsys"
    if facts.get("cuda_available") or len(profile.kernels):
        return "torch-only"
    return "cpu-only"


def _pass_rows(run_json: dict, run: RunDir) -> list[dict]:
    """One row per pass with its step time; overhead is measured against the plain pass (`--baseline`)
    only. The warmup steps each pass times outside its collector are kept for reference, but are no
    baseline: on the H200 they ran up to 30% slower than measured steps (cuDNN autotuning, allocator
    growth), which would show a collector as negative overhead. `overhead_ci_pct` is the 95% interval of
    Welch's test on the two windows' steps: a CPU resnet50's torch pass read -18.8% on 3 steps against 10
    plain ones whose spread alone was 21%, an interval that holds no change."""
    rows = []
    plain_ms = next(
        (p.get("step_time_ms") for p in run_json.get("passes") or [] if p["name"] == "plain"), None
    )
    plain_steps = step_test.from_samples(plain_step_samples_ms(run), "plain", robust=True)
    for entry in run_json.get("passes") or []:
        inject = run.read_inject(entry["name"]) or {}
        row = dict(entry)
        row["unprofiled_step_time_ms"] = inject.get("unprofiled_step_time_ms")
        step_ms = row.get("step_time_ms")
        # Under ncu each kernel is replayed many times: its step time is replay cost, not overhead.
        measurable = entry["name"] in ("torch", "nsys") and step_ms and plain_ms
        row["overhead_pct"] = round(100.0 * (step_ms / plain_ms - 1.0), 1) if measurable else None
        measured_steps = step_test.from_samples(step_samples_ms(inject), "profiled")
        if measurable and plain_steps and measured_steps:
            low, high = step_test.welch(plain_steps, measured_steps)["ci_pct"]
            row["overhead_ci_pct"] = [round(low, 1), round(high, 1)]
        rows.append(row)
    return rows


def stages() -> tuple[Stage, ...]:
    """What is done to the findings after the rules, in order: place them in the user's code, weigh them
    at the plain step, replay their fixes (which refines the plain-step figure) and correct the replay by
    what verified fixes realized on this GPU, put what the fixes `--verify` switched on realized in this run
    beside them, then grade and order them on the figures the report leads with (a realized saving before
    a predicted one)."""
    from hybrid.analysis.callsites import attach_callsites
    from hybrid.analysis.diagnosis import grade, weigh_at_plain_step
    from hybrid.analysis.verified import attach_verified
    from hybrid.replay.corrected import correct_by_verified
    from hybrid.replay.predict import replay_findings

    return (
        attach_callsites,
        weigh_at_plain_step,
        replay_findings,
        correct_by_verified,
        attach_verified,
        grade,
    )


def diagnose(
    profile: Profile,
    *,
    baseline_step_ms: float | None = None,
    calibration: dict | None = None,
    script: str | None = None,
    script_is_module: bool = False,
    stack_profiles: list[Profile] | None = None,
    verified: dict | None = None,
    realized_history: dict | None = None,
) -> tuple[dict, Diagnosis]:
    """The analysis keys of results.json and the Diagnosis after every stage. `script`: the profiled
    script's path as the run was given it (callsites are shown relative to its folder), or a module's file
    below its package's folder (`script_is_module`); None for a foreign export. `stack_profiles`: other
    profiles of the run whose Python stacks may place the findings (the torch pass's, on its own clock)."""
    from hybrid.analysis.analyze import analyze

    document, diagnosis, analyzed = analyze(profile)
    analyzed.stack_profiles = list(stack_profiles or [])
    analyzed.baseline_step_ms, analyzed.calibration = baseline_step_ms, calibration
    analyzed.script, analyzed.script_is_module = script, script_is_module
    analyzed.verified, analyzed.realized_history = verified, realized_history
    for stage in stages():
        stage(diagnosis, analyzed)
    diagnosis.to_results(document)
    return document, diagnosis


def analyze_profile(
    profile: Profile,
    *,
    workload: dict,
    tools: dict,
    passes: list[dict],
    extra_warnings: list[str] | None = None,
    facts: dict | None = None,
    baseline_step_ms: float | None = None,
    calibration: dict | None = None,
    script: str | None = None,
    script_is_module: bool = False,
    stack_profiles: list[Profile] | None = None,
) -> dict:
    """The results document of one profile (see diagnose)."""
    return _results(
        profile,
        workload=workload,
        tools=tools,
        passes=passes,
        extra_warnings=extra_warnings,
        facts=facts,
        baseline_step_ms=baseline_step_ms,
        calibration=calibration,
        script=script,
        script_is_module=script_is_module,
        stack_profiles=stack_profiles,
    )[0]


def _results(
    profile: Profile,
    *,
    workload: dict,
    tools: dict,
    passes: list[dict],
    extra_warnings: list[str] | None = None,
    facts: dict | None = None,
    **stage_inputs,
) -> tuple[dict, Diagnosis]:
    facts = facts or {}
    analysis, diagnosis = diagnose(profile, **stage_inputs)
    results = {
        "schema_version": SCHEMA_VERSION,
        "mode": _mode(profile, facts),
        "tools": {"hybrid": __version__, "python": sys.version.split()[0], **tools},
        "workload": workload,
        **analysis,
        "passes": passes,
        "warnings": list(dict.fromkeys((extra_warnings or []) + profile.warnings)),
    }
    return results, diagnosis


def _counters_from_report(run: RunDir, notes: list[str]) -> Path | None:
    """The counters of the saved ncu report when the pass left no counters.csv (ncu stopped before the CSV
    was written): read back with the ncu found on this machine, if any, into a temporary folder removed
    when the process ends, as the run directory is an input (`hybrid report` never writes into it)."""
    import atexit
    import shutil
    import tempfile

    from hybrid.collect import ncu_tool as ncu

    report = run.path / "ncu" / ncu.REPORT_NAME
    found = ncu.find_ncu() if report.is_file() else None
    if found is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="hybrid-counters-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    csv = folder / "counters.csv"
    try:
        ncu.export_counters(found, report, csv)
    except OutputError as error:
        notes.append(f"the counters in {report} were not read back: {error.cause}")
        return None
    return csv if csv.is_file() else None


def _load_intact(label: str, load: Callable[[], Profile], damaged: list[InputError]) -> Profile | None:
    """`load()`, or None with the error kept when the artifact is damaged: one bad artifact must not
    block the analysis of the intact ones."""
    try:
        return load()
    except InputError as error:
        error.cause = f"{label}: {error.cause}"
        damaged.append(error)
        return None


def load_run_dir(
    path: Path,
    *,
    step_range: str | None = None,
    peer_counters: Path | None = None,
    ncu_csv: Path | None = None,
    notes: list[str] | None = None,
    load_torch: Callable[[Path], Profile] | None = None,
) -> tuple[RunDir, Profile | None, Profile | None, Path | None]:
    """A run directory's torch and nsys profiles (None for a pass that left nothing to analyze) and its
    ncu CSV. `ncu_csv`: counters to use instead of the folder's own (`hybrid report DIR --ncu CSV`);
    `peer_counters`: an ncu CSV measured in another process running the same kernels (a job's ncu rank),
    used when the folder has none of its own; `load_torch`: how the torch trace is read (default
    hybrid.load.torch_trace; the orchestrator's reads it while the nsys pass runs). A damaged artifact is
    left out, with a line in `notes`, while another one is intact; InputError when none is."""
    notes = notes if notes is not None else []
    run = RunDir.open(path)
    trace, export = run.torch_trace(), run.nsys_export()
    if trace is None and export is None:
        raise InputError(
            f"{path} holds neither torch/trace.json nor nsys/profile.sqlite",
            "point at a run directory written by `hybrid run`; if a pass failed, its "
            "console.log in that folder says why",
        )
    damaged: list[InputError] = []
    torch_profile = nsys_profile = None
    if trace is not None:
        from hybrid.load.torch_trace import load_torch_trace

        read_trace = load_torch or load_torch_trace
        torch_profile = _load_intact("torch trace", lambda: read_trace(trace), damaged)
    if export is not None:
        from hybrid.load.nsys_export import load_nsys_export

        nsys_profile = _load_intact(
            "nsys export", lambda: load_nsys_export(export, step_range=step_range), damaged
        )
    if torch_profile is None and nsys_profile is None:
        if len(damaged) == 1:
            raise damaged[0]
        raise InputError(
            "no artifact of this run could be read:\n" + "\n".join(f"  {e.cause}" for e in damaged),
            damaged[0].fix,
        )
    if nsys_profile is not None and not len(nsys_profile.kernels):
        if torch_profile is None:
            raise _no_kernels(export, nsys_profile)
        # Keep the run: analyze the torch pass alone and say why nsys could not contribute.
        torch_profile.warnings += nsys_profile.warnings
        nsys_profile = None
    notes += [f"{error.cause}; analyzed without it" for error in damaged]
    csv = ncu_csv or run.ncu_csv() or _counters_from_report(run, notes) or peer_counters
    return run, torch_profile, nsys_profile, csv


def analyze_run_dir(
    path: Path,
    *,
    step_range: str | None = None,
    peer_counters: Path | None = None,
    ncu_csv: Path | None = None,
) -> dict:
    """Re-analyze a run directory written by `hybrid run` (offline, on any machine); see load_run_dir."""
    return diagnose_run_dir(path, step_range=step_range, peer_counters=peer_counters, ncu_csv=ncu_csv)[0]


def diagnose_run_dir(
    path: Path,
    *,
    step_range: str | None = None,
    peer_counters: Path | None = None,
    ncu_csv: Path | None = None,
) -> tuple[dict, Diagnosis]:
    """analyze_run_dir's results, and the Diagnosis they were written from (a job combines its ranks')."""
    notes: list[str] = []
    loaded = load_run_dir(
        path, step_range=step_range, peer_counters=peer_counters, ncu_csv=ncu_csv, notes=notes
    )
    return _diagnose_artifacts(*loaded, notes=notes, counters_required=ncu_csv is not None)


def merged_profile(
    run: RunDir,
    torch_profile: Profile | None,
    nsys_profile: Profile | None,
    ncu_csv: Path | None,
    *,
    notes: list[str] | None = None,
    counters_required: bool = False,
) -> tuple[Profile, dict]:
    """The one Profile analyzed from a run directory's loaded profiles (merged in place), with the
    injector's facts in its extras and the counters attached; and those facts. Counters that cannot be
    attached are a line in `notes`, or InputError with `counters_required` (the user named the CSV)."""
    notes = notes if notes is not None else []
    profile = merge(torch_profile, nsys_profile)
    facts = _inject_facts(run, notes)
    profile.extras.update({k: v for k, v in facts.items() if k not in profile.extras})
    if ncu_csv is not None and nsys_profile is None and counters_required:
        raise InputError(
            f"{ncu_csv} cannot be used: ncu counters are matched to the kernels of an nsys export, "
            f"and {run.path} has no readable one",
            "pass a run directory with nsys/profile.sqlite",
        )
    if ncu_csv is not None and nsys_profile is not None:
        try:
            profile = _attach_ncu(profile, ncu_csv)
        except InputError as error:
            if counters_required:
                raise
            notes.append(f"ncu counters left out: {error.cause}")
    return profile, facts


def analyze_artifacts(
    run: RunDir,
    torch_profile: Profile | None,
    nsys_profile: Profile | None,
    ncu_csv: Path | None,
    *,
    baseline_step_ms: float | None = None,
    notes: list[str] | None = None,
    counters_required: bool = False,
    calibration: dict | None = None,
) -> dict:
    """The results document from a run directory's loaded profiles (merged in place: pass copies to
    analyze the same profiles more than once, as the planted-suite scorer does per mode). The
    baseline step time is the plain pass's unless given, the GPU's calibration the run folder's. `notes`
    become warnings. Counters that cannot be attached are left out with a warning, or raise InputError
    with `counters_required` (the user named the CSV)."""
    return _diagnose_artifacts(
        run,
        torch_profile,
        nsys_profile,
        ncu_csv,
        baseline_step_ms=baseline_step_ms,
        notes=notes,
        counters_required=counters_required,
        calibration=calibration,
    )[0]


def _diagnose_artifacts(
    run: RunDir,
    torch_profile: Profile | None,
    nsys_profile: Profile | None,
    ncu_csv: Path | None,
    *,
    baseline_step_ms: float | None = None,
    notes: list[str] | None = None,
    counters_required: bool = False,
    calibration: dict | None = None,
) -> tuple[dict, Diagnosis]:
    notes = list(notes or [])
    run_json = run.run_json()
    # merge() adopts the nsys profile; the torch profile keeps its own frames (for callsites).
    stack_profiles = [torch_profile] if torch_profile is not None and nsys_profile is not None else []
    profile, facts = merged_profile(
        run, torch_profile, nsys_profile, ncu_csv, notes=notes, counters_required=counters_required
    )
    stepped = _step_inject(run, profile)
    workload = {
        "command": run_json.get("command"),
        "steps_measured": profile.measured_steps,
        # Steps actually dropped before the window (at least --warmup, more until step times settled).
        "warmup_steps": _warmup_dropped(profile, stepped, facts),
        "warmup_reason": (run_json.get("fixed_warmup") or {}).get("reason") or stepped.get("warmup_reason"),
        "batch_size": facts.get("batch_size"),
        **step_fields(profile, stepped),
        "model": run_json.get("model"),
    }
    tools = {k: v for k, v in (run_json.get("tools") or {}).items() if k.endswith("_version")}
    tools["torch"] = facts.get("torch_version")
    passes = _pass_rows(run_json, run)
    notes += run.problems
    # How each pass ended, for advice on getting what is missing; a job's rank folder has the job's passes.
    job_passes = (
        run_json.get("passes")
        or (RunDir(run.path.parent).run_json().get("passes") if run.path.name.startswith("rank-") else None)
        or []
    )
    profile.extras["pass_status"] = {p["name"]: p.get("status") for p in job_passes}
    if baseline_step_ms is None:
        baseline_step_ms = next((p.get("step_time_ms") for p in passes if p["name"] == "plain"), None)
    results, diagnosis = _results(
        profile,
        workload=workload,
        tools=tools,
        passes=passes,
        extra_warnings=list(run_json.get("mode_reasons") or []) + list(facts.get("warnings") or []) + notes,
        facts=facts,
        baseline_step_ms=baseline_step_ms,
        calibration=calibration or read_calibration(run, run_json),
        script=_script(run_json),
        script_is_module=bool((run_json.get("target") or {}).get("is_module")),
        stack_profiles=stack_profiles,
        verified=verified_fixes(run),
        realized_history=read_snapshot(run.path),
    )
    if results["timing"].get("baseline_step_time_ms") is not None:
        results["timing"]["baseline_step_times_ms"] = plain_step_samples_ms(run)
    results["artifacts"] = run_artifacts(run)
    return results, diagnosis


def plain_step_samples_ms(run: RunDir) -> list[float]:
    """The plain pass's step durations: `hybrid compare` tests on these where both runs have them, free of
    any collector's slowdown."""
    return step_samples_ms(run.plain_steps_inject())


def step_samples_ms(inject: dict) -> list[float]:
    """A pass's step durations from its step ends (host clock, offsets from the window's start)."""
    ends = inject.get("step_end_ns") or []
    if not isinstance(ends, list):
        return []
    starts = [0, *ends[:-1]] if ends else []
    if not all(isinstance(end, int) and end > start for start, end in zip(starts, ends, strict=True)):
        return []  # a damaged inject.json: no samples rather than negative steps
    return [round((end - start) / 1e6, 6) for start, end in zip(starts, ends, strict=True)]


def run_artifacts(run: RunDir) -> dict[str, str]:
    """The raw files the run kept, relative to its directory, for the commands that open them in their
    own tools (hybrid.report.views)."""
    from hybrid.collect import ncu_tool as ncu

    found = {
        "torch_trace": run.torch_trace(),
        "nsys_report": run.path / "nsys" / "profile.nsys-rep",
        "nsys_export": run.nsys_export(),
        "ncu_report": run.path / "ncu" / ncu.REPORT_NAME,
    }
    return {
        key: path.relative_to(run.path).as_posix()
        for key, path in found.items()
        if path is not None and path.is_file()
    }


def read_calibration(run: RunDir, run_json: dict) -> dict:
    """The speedups the calibration pass measured for this run (hybrid.collect.calibration_pass), or
    {"not_run": why there are none}: the reason the findings it would have replayed give for their model."""
    import json

    from hybrid.files import read_regular_text
    from hybrid.replay.calibrate import CALIBRATION_FILE

    try:
        calibration = json.loads(read_regular_text(run.path / CALIBRATION_FILE))
        if isinstance(calibration, dict):
            return calibration
        return {
            "not_run": f"the run's {CALIBRATION_FILE} is a JSON {type(calibration).__name__}, not an object"
        }
    except FileNotFoundError:
        pass
    except (OSError, ValueError, RecursionError) as error:
        return {"not_run": f"the run's {CALIBRATION_FILE} is unreadable ({error})"}
    row = next((p for p in run_json.get("passes") or [] if p.get("name") == "calibration"), None)
    if row is not None:
        return {"not_run": f"the calibration pass {row.get('status')}: {row.get('message')}"}
    recorded = run_json.get("calibration")
    skipped = recorded.get("skipped") if isinstance(recorded, dict) else None
    return {
        "not_run": skipped
        or "the run has no calibration pass (`python -m hybrid.collect.calibrate_run RUN_DIR` on its GPU "
        "adds one)"
    }


def _script(run_json: dict) -> str | None:
    """The script as the run was given it; for `-m pkg.mod`, pkg/mod.py."""
    target = run_json.get("target") or {}
    argv = target.get("argv") or []
    if not argv:
        return None
    return str(argv[0]).replace(".", "/") + ".py" if target.get("is_module") else str(argv[0])


def analyze_export(export: Path, *, ncu_csv: Path | None = None, step_range: str | None = None) -> dict:
    """Analyze an nsys SQLite export made by the user's own `nsys profile` (and optionally an ncu CSV)."""
    from hybrid.load.nsys_export import load_nsys_export

    profile = load_nsys_export(export, step_range=step_range)
    if not len(profile.kernels):
        raise _no_kernels(export, profile)
    if ncu_csv is not None:
        profile = _attach_ncu(profile, ncu_csv)
    workload = {
        "command": f"nsys export {export.name}",
        "steps_measured": profile.measured_steps,
        "warmup_steps": None,
        **step_fields(profile),
    }
    nsys_facts = profile.extras.get("nsys", {})
    results = analyze_profile(
        profile, workload=workload, tools={"nsys_version": nsys_facts.get("product_version")}, passes=[]
    )
    # Relative to the export's folder, where its .nsys-rep normally lies.
    report = export.with_suffix(".nsys-rep")
    results["artifacts"] = {
        "nsys_export": export.name,
        **({"nsys_report": report.name} if report.is_file() else {}),
    }
    return results


def rank_path(run_dir: Path, rank: int) -> Path:
    """The folder of one rank (`--rank K`), a single-process run directory."""
    folder = run_dir / rank_dir_name(rank)
    if not folder.is_dir():
        have = ", ".join(str(r) for r in find_rank_dirs(run_dir)) or "none"
        raise UsageError(f"{run_dir} has no rank {rank}", f"pass one of the ranks it holds: {have}")
    return folder


def _job_findings(block: dict, rank_results: dict[int, dict]) -> list[Finding]:
    """The job's own findings: communication and the straggler, from the job block's metrics."""
    from hybrid.provenance import Metric
    from hybrid.rules import communication, engine
    from hybrid.rules.base import Context, JobFacts

    metrics = {name: Metric(**m) for name, m in block["metrics"].items() if m["value"] is not None}
    job = JobFacts()
    late = block.get("straggler")
    if late is not None:
        own = (rank_results.get(late["rank"], {}).get("diagnosis") or {}).get("primary_bottleneck")
        if own:
            job = JobFacts(
                straggler_primary_title=own["title"],
                straggler_primary_source=own["evidence"][0]["source"] if own.get("evidence") else "estimated",
            )
    ctx = Context(metrics=metrics, job=job, config=_job_config(rank_results))
    findings = engine.run(communication.RULES, ctx)
    for finding in findings:
        finding.callsite_reason = communication.JOB_CALLSITE_REASON
        model_ms, reason = communication.replay_outcome(finding.id, ctx)
        finding.time_lost_method = "model" if model_ms is None else "replay"
        finding.time_lost_model_ms, finding.replay_reason = model_ms, reason
    return findings


def _job_config(rank_results: dict[int, dict]) -> RunConfig:
    """The job's configuration: the first rank's (ranks run one script)."""
    first = next(iter(rank_results.values()), {})
    return config_of(first, observed_config(first.get("metrics") or {}))


# The straggler rank's top finding explains the others' wait when it holds at least half of it
# (h200-ddp-slow-rank: rank 1's host work 30.3 ms a step against a 31.8 ms wait; the healthy job's rank 1,
# 0.88 against 0.89).
STRAGGLER_EXPLAINED = 0.5


def _straggler_remedy(diagnosis: Diagnosis, late: dict | None, rank_results: dict[int, dict]) -> None:
    """One cause, one finding: the others wait for the straggler's own top finding, so that finding, kept
    from the straggler rank, is shown as the remedy of the straggler's time rather than added to it."""
    from hybrid.rules import communication

    # The job rule that reads the straggler's lateness (its id has one home, its rule's module).
    ids = {rule.id for rule in communication.RULES if "straggler_lateness_ms" in rule.requires}
    straggler = next((f for f in diagnosis.findings if f.id in ids), None)
    if straggler is None or late is None:
        return
    own = (rank_results.get(late["rank"], {}).get("diagnosis") or {}).get("primary_bottleneck")
    for finding in diagnosis.findings:
        if (
            own
            and finding.id == own["id"]
            and finding.rank == late["rank"]
            and finding.time_lost_ms >= STRAGGLER_EXPLAINED * straggler.time_lost_ms
        ):
            finding.alternative_to = [straggler.id]


def analyze_job(run_dir: Path) -> dict:
    """The job's results.json: the representative rank's results (the straggler, else the slowest
    rank) with the job's diagnosis, a `job` block and a `ranks` summary. Each rank is analyzed by
    `pipeline.analyze_run_dir`, as a single run."""
    run_dir = Path(run_dir)
    folders = find_rank_dirs(run_dir)
    if not folders:
        raise InputError(
            f"{run_dir} holds no rank-XX folders, so it is not a multi-process run directory",
            "pass the folder `hybrid run --nproc-per-node N` wrote, or use `hybrid report` on a single run",
        )
    warnings, rank_results, timelines = [], {}, []
    diagnoses: dict[int, Diagnosis] = {}
    ncu_rank = (RunDir(run_dir).run_json().get("job") or {}).get("ncu_rank")
    peer_counters = RunDir(folders[ncu_rank]).ncu_csv() if ncu_rank in folders else None
    for r, folder in folders.items():
        try:
            rank_results[r], diagnoses[r] = diagnose_run_dir(folder, peer_counters=peer_counters)
            if peer_counters is not None and r != ncu_rank:
                # Ranks run the same kernels; ncu replayed one rank's, so the others take them by name and
                # launch configuration (a kernel launched only here keeps its estimates).
                rank_results[r]["warnings"].append(
                    f"hardware counters of rank {r} were measured on rank {ncu_rank}'s kernels (ncu ran on "
                    "one rank) and matched to this rank's by kernel name and launch configuration"
                )
        except InputError as error:
            warnings.append(f"rank {r} left nothing to analyze ({error.cause})")
            continue
        timeline = load_rank_timeline(r, folder)
        if timeline is not None:
            timelines.append(timeline)
    if not rank_results:
        raise InputError(
            f"no rank of {run_dir} left a torch trace or an nsys export",
            "each rank's console output is in RUN/<pass>/console.log; re-run the job",
        )
    block, match_warnings = job_block(timelines, rank_results)
    config = _job_config(rank_results)
    block["collectives"] = job_overlap(
        {t.rank: step_collectives(t) for t in timelines},
        fsdp2=config.fsdp2,
        ddp_bucket_cap_mb=config.ddp_bucket_cap_mb,
        ddp_param_mb=config.ddp_param_mb,
    )
    block["metrics"].update(overlap_metrics(block["collectives"], block["comm_source"]))
    warnings += match_warnings + _job_warnings(block, timelines, rank_results)
    late = block.get("straggler")
    representative = (
        late["rank"]
        if late and late["rank"] in rank_results
        else block["slowest_rank"]
        if block["slowest_rank"] in rank_results
        else min(rank_results)
    )
    diagnosis = Diagnosis.combine(
        diagnoses[representative], diagnoses, _job_findings(block, rank_results), block["ranks"]
    )
    _straggler_remedy(diagnosis, block.get("straggler"), rank_results)
    results = copy.deepcopy(rank_results[representative])
    # The representative rank's artifacts, relative to the job's folder (the report opens them from there).
    rank_folder = folders[representative].relative_to(run_dir).as_posix()
    results["artifacts"] = {
        key: f"{rank_folder}/{path}" for key, path in (results.get("artifacts") or {}).items()
    }
    run_json = RunDir(run_dir).run_json()
    block["representative_rank"] = representative
    block["ncu_rank"] = (run_json.get("job") or {}).get("ncu_rank")
    block["ncu_rank_reason"] = (run_json.get("job") or {}).get("ncu_rank_reason")
    results["job"] = block
    results["ranks"] = {
        str(r): {
            "dir": rank_dir_name(r),
            "step_time_ms": res["timing"].get("step_time_ms"),
            "mode": res.get("mode"),
            "primary_bottleneck": (res["diagnosis"].get("primary_bottleneck") or {}).get("title"),
        }
        for r, res in rank_results.items()
    }
    results["workload"] = {
        **results["workload"],
        "command": run_json.get("command", results["workload"].get("command")),
        "ranks": len(folders),
    }
    results["diagnosis"] = diagnosis.to_dict()
    results["warnings"] = list(
        dict.fromkeys(warnings + list(run_json.get("mode_reasons", [])) + results["warnings"])
    )
    results["limitations"] = results["limitations"] + _job_limitations(block)
    return results


def _job_warnings(block: dict, timelines: list, rank_results: dict) -> list[str]:
    out = []
    steps = {r: res["workload"].get("steps_measured") for r, res in rank_results.items()}
    if len(set(steps.values())) > 1:
        out.append(
            "ranks measured different numbers of steps ("
            + ", ".join(f"rank {r}: {n}" for r, n in steps.items())
            + "): a rank stopped early or stepped differently; per-step figures use the steps each has"
        )
    with_comm = [t.rank for t in timelines if len(t.comm)]
    silent = [t.rank for t in timelines if not len(t.comm)]
    if with_comm and silent:
        out.append(
            f"rank(s) {', '.join(map(str, silent))} ran no collective in the measured steps while "
            f"rank(s) {', '.join(map(str, with_comm))} did: the ranks are not running the same program path"
        )
    return out


def _job_limitations(block: dict) -> list[str]:
    backend = block.get("backend")
    out = []
    if backend and not any(name in backend for name in ("nccl", "gloo")):
        out.append(
            f"The job's process group uses the {backend!r} backend: hybrid sees collectives of NCCL (its "
            "kernels) and gloo (torch.profiler ranges) only, so communication time, overlap and waits are "
            "not measured for it."
        )
    elif not block["comm_by_collective_ms"] and len(block["ranks"]) > 1:
        out.append(
            "No collective was seen in the measured steps: the ranks did not communicate through NCCL or "
            "gloo (or used a backend hybrid cannot see); communication and straggler figures are absent."
        )
    return out
