"""One analysis pipeline for fresh runs, saved run directories and foreign exports alike:
artifacts -> Profile (merged from the passes that ran) -> analyze -> the results.json document."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from hybrid import __version__
from hybrid.errors import InputError, OutputError
from hybrid.profile import STEP_COLUMNS, Profile
from hybrid.rundir import RunDir
from hybrid.schema import SCHEMA_VERSION

# Frames the nsys export measures better than torch.profiler; the torch pass keeps `ops` (names,
# shapes, dtypes, FLOP estimates) which nsys cannot see.
NSYS_FRAMES = ("steps", "kernels", "memcpys", "memsets", "syncs", "launches", "layers", "api_calls")


def _no_kernels(export: Path, profile: Profile) -> InputError:
    reason = profile.extras.get("nsys", {}).get("no_kernels_reason") or "no CUDA kernel was recorded"
    return InputError(f"{export} holds no kernels: {reason}",
                      "profile the steps that launch GPU work (nsys profile -t cuda ...; with "
                      "--capture-range, make sure the range opens), then export again")


def merge(torch_profile: Profile | None, nsys_profile: Profile | None) -> Profile:
    if nsys_profile is None:
        if torch_profile is None:
            raise InputError("no torch trace and no nsys export to analyze",
                             "pass a run directory written by `hybrid run`, or an nsys .sqlite export")
        return torch_profile
    if torch_profile is None:
        return nsys_profile
    from hybrid.metrics import OPS_CLOCK_STEP_NS, steady_steps, step_windows

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
    from hybrid.ncu_pass import attach_counters
    from nsight.ncu_csv import parse_ncu_csv

    counters = parse_ncu_csv(csv_path)
    attached = attach_counters(profile, counters)
    ncu = attached.extras["ncu"]
    matched = sum(level in ("launch", "config") for level in ncu["kernel_match"])
    if len(counters.frame) and matched == 0:
        raise InputError(f"{csv_path}: none of its {len(counters.frame)} kernel(s) is a kernel of this profile "
                         "(no kernel name with the same grid and block): the counters come from another workload",
                         "pass the CSV ncu measured on this workload, or leave --ncu out")
    # What the reader noticed (metrics missing or n/a, rows skipped, units not understood) is said.
    attached.warnings += [f"{csv_path.name}: {note}" for note in counters.notes]
    return attached


def _inject_facts(run: RunDir, notes: list[str] | None = None) -> dict:
    """Facts the injector recorded in the process (peak memory, graph breaks, batch size); the torch
    pass is preferred since it ran the full measured window. A damaged inject.json is skipped and said."""
    for name in ("torch", "nsys", "plain", "ncu"):
        if notes is not None and run.inject_damaged(name):
            notes.append(f"{run.path / name / 'inject.json'} cannot be read as a JSON object: the facts "
                         "it records (batch size, peak memory, configuration) are left out")
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
        fields = {key: inject.get(key) for key in ("step_source", "step_unit", "step_confidence", "step_reason")}
    else:
        fields = {"step_source": profile.step_source, "step_unit": profile.step_unit,
                  "step_confidence": profile.step_confidence, "step_reason": profile.step_reason}
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
    preferred = {"nvtx:hybrid": ("nsys", "torch"), "torch:annotation": ("torch", "nsys")}.get(profile.step_source, ())
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
    growth), which would show a collector as negative overhead."""
    rows = []
    plain_ms = next((p.get("step_time_ms") for p in run_json.get("passes") or [] if p["name"] == "plain"), None)
    for entry in run_json.get("passes") or []:
        inject = run.read_inject(entry["name"]) or {}
        row = dict(entry)
        row["unprofiled_step_time_ms"] = inject.get("unprofiled_step_time_ms")
        step_ms = row.get("step_time_ms")
        # Under ncu each kernel is replayed many times: its step time is replay cost, not overhead.
        measurable = entry["name"] in ("torch", "nsys") and step_ms and plain_ms
        row["overhead_pct"] = round(100.0 * (step_ms / plain_ms - 1.0), 1) if measurable else None
        rows.append(row)
    return rows


# A collector that slowed the analyzed step by more than this (vs the plain pass) distorts the diagnosis:
# the headline says so and findings are weighed at the plain step. Below it, the run-to-run spread of a
# steady loop (a few %) and the collectors' usual cost on large-kernel models (<1% for resnet50) sit.
COLLECTOR_DISTORTION_PCT = 10.0


def at_baseline(analysis: dict, baseline_step_ms: float | None) -> None:
    """Give each finding `time_lost_baseline_ms`: its time lost as the same share of the step without a
    collector (the plain pass). Collectors slow the host side most (nsys traced launch_batch1_deep_mlp
    at 123.7 ms a step, 50.5 ms plain), and a fix saves time on the plain step: on the H200 planted
    suite, scaling brought 12 of 18 primary estimates within 30% of the realized saving (10 unscaled).
    The scaling is proportional, a first-order correction: it does not know which part of the step
    the collector slowed."""
    step_ms = (analysis.get("timing") or {}).get("step_time_ms")
    if not baseline_step_ms or not step_ms:
        return
    analysis["timing"]["baseline_step_time_ms"] = baseline_step_ms
    overhead_pct = 100.0 * (step_ms / baseline_step_ms - 1.0)
    analysis["timing"]["collector_overhead_pct"] = overhead_pct
    analysis["timing"]["weighed_at_plain_step"] = overhead_pct > COLLECTOR_DISTORTION_PCT
    primary = analysis["diagnosis"].get("primary_bottleneck")
    # The primary is its own copy of one of the bottlenecks.
    for finding in [*analysis["diagnosis"]["bottlenecks"], *([primary] if primary else [])]:
        finding["time_lost_baseline_ms"] = finding["time_lost_ms"] * baseline_step_ms / step_ms


def analyze_profile(profile: Profile, *, workload: dict, tools: dict, passes: list[dict],
                    extra_warnings: list[str] | None = None, facts: dict | None = None,
                    baseline_step_ms: float | None = None, calibration: dict | None = None,
                    script: str | None = None, script_is_module: bool = False,
                    stack_profiles: list[Profile] | None = None) -> dict:
    """`script`: the profiled script's path as the run was given it (callsites are shown relative
    to its folder), or a module's file below its package's folder (`script_is_module`); None for a
    foreign export. `stack_profiles`: other profiles of the
    run whose Python stacks may place the findings (the torch pass's, on its own clock)."""
    from hybrid.analyze import analyze
    from hybrid.callsites import attach_callsites
    from hybrid.grade import grade
    from hybrid.replay.predict import replay_findings

    facts = facts or {}
    analysis = analyze(profile)
    attach_callsites(analysis, [profile, *(stack_profiles or [])], script, module=script_is_module)
    at_baseline(analysis, baseline_step_ms)
    replay_findings(profile, analysis, baseline_step_ms=baseline_step_ms, calibration=calibration)
    grade(analysis)
    results = {
        "schema_version": SCHEMA_VERSION,
        "mode": _mode(profile, facts),
        "tools": {"hybrid": __version__, "python": sys.version.split()[0], **tools},
        "workload": workload,
        **analysis,
        "passes": passes,
        "warnings": list(dict.fromkeys((extra_warnings or []) + profile.warnings)),
    }
    results.setdefault("limitations", [])
    return results


def _counters_from_report(run: RunDir, notes: list[str]) -> Path | None:
    """counters.csv from the saved ncu report when the pass left none (ncu stopped before the CSV was
    written): read back with the ncu found on this machine, if any."""
    from nsight import ncu

    report = run.path / "ncu" / ncu.REPORT_NAME
    found = ncu.find_ncu() if report.is_file() else None
    if found is None:
        return None
    try:
        ncu.export_counters(found, report, run.path / "ncu" / "counters.csv")
    except OutputError as error:
        notes.append(f"the counters in {report} were not read back: {error.cause}")
        return None
    return run.ncu_csv()


def _load_intact(label: str, load: Callable[[], Profile], damaged: list[InputError]) -> Profile | None:
    """`load()`, or None with the error kept when the artifact is damaged: one bad artifact must not
    block the analysis of the intact ones."""
    try:
        return load()
    except InputError as error:
        error.cause = f"{label}: {error.cause}"
        damaged.append(error)
        return None


def load_run_dir(path: Path, *, step_range: str | None = None, peer_counters: Path | None = None,
                 ncu_csv: Path | None = None, notes: list[str] | None = None
                 ) -> tuple[RunDir, Profile | None, Profile | None, Path | None]:
    """A run directory's torch and nsys profiles (None for a pass that left nothing to analyze) and its
    ncu CSV. `ncu_csv`: counters to use instead of the folder's own (`hybrid report DIR --ncu CSV`);
    `peer_counters`: an ncu CSV measured in another process running the same kernels (a job's ncu rank),
    used when the folder has none of its own. A damaged artifact is left out, with a line in `notes`,
    while another one is intact; InputError when none is."""
    notes = notes if notes is not None else []
    run = RunDir.open(path)
    trace, export = run.torch_trace(), run.nsys_export()
    if trace is None and export is None:
        raise InputError(f"{path} holds neither torch/trace.json nor nsys/profile.sqlite",
                         "point at a run directory written by `hybrid run`; if a pass failed, its "
                         "console.log in that folder says why")
    damaged: list[InputError] = []
    torch_profile = nsys_profile = None
    if trace is not None:
        from hybrid.torch_pass import load_torch_trace

        torch_profile = _load_intact("torch trace", lambda: load_torch_trace(trace), damaged)
    if export is not None:
        from hybrid.nsys_pass import load_nsys_export

        nsys_profile = _load_intact("nsys export", lambda: load_nsys_export(export, step_range=step_range), damaged)
    if torch_profile is None and nsys_profile is None:
        if len(damaged) == 1:
            raise damaged[0]
        raise InputError("no artifact of this run could be read:\n" + "\n".join(f"  {e.cause}" for e in damaged),
                         damaged[0].fix)
    if nsys_profile is not None and not len(nsys_profile.kernels):
        if torch_profile is None:
            raise _no_kernels(export, nsys_profile)
        # Keep the run: analyze the torch pass alone and say why nsys could not contribute.
        torch_profile.warnings += nsys_profile.warnings
        nsys_profile = None
    notes += [f"{error.cause}; analyzed without it" for error in damaged]
    csv = ncu_csv or run.ncu_csv() or _counters_from_report(run, notes) or peer_counters
    return run, torch_profile, nsys_profile, csv


def analyze_run_dir(path: Path, *, step_range: str | None = None, peer_counters: Path | None = None,
                    ncu_csv: Path | None = None) -> dict:
    """Re-analyze a run directory written by `hybrid run` (offline, on any machine); see load_run_dir."""
    notes: list[str] = []
    loaded = load_run_dir(path, step_range=step_range, peer_counters=peer_counters, ncu_csv=ncu_csv, notes=notes)
    return analyze_artifacts(*loaded, notes=notes, counters_required=ncu_csv is not None)


def merged_profile(run: RunDir, torch_profile: Profile | None, nsys_profile: Profile | None,
                   ncu_csv: Path | None, *, notes: list[str] | None = None,
                   counters_required: bool = False) -> tuple[Profile, dict]:
    """The one Profile analyzed from a run directory's loaded profiles (merged in place), with the
    injector's facts in its extras and the counters attached; and those facts. Counters that cannot be
    attached are a line in `notes`, or InputError with `counters_required` (the user named the CSV)."""
    notes = notes if notes is not None else []
    profile = merge(torch_profile, nsys_profile)
    facts = _inject_facts(run, notes)
    profile.extras.update({k: v for k, v in facts.items() if k not in profile.extras})
    if ncu_csv is not None and nsys_profile is None and counters_required:
        raise InputError(f"{ncu_csv} cannot be used: ncu counters are matched to the kernels of an nsys export, "
                         f"and {run.path} has no readable one", "pass a run directory with nsys/profile.sqlite")
    if ncu_csv is not None and nsys_profile is not None:
        try:
            profile = _attach_ncu(profile, ncu_csv)
        except InputError as error:
            if counters_required:
                raise
            notes.append(f"ncu counters left out: {error.cause}")
    return profile, facts


def analyze_artifacts(run: RunDir, torch_profile: Profile | None, nsys_profile: Profile | None,
                      ncu_csv: Path | None, *, baseline_step_ms: float | None = None,
                      notes: list[str] | None = None, counters_required: bool = False) -> dict:
    """The results document from a run directory's loaded profiles (merged in place: pass copies to
    analyze the same profiles more than once, as the planted-suite scorer does per mode). The
    baseline step time is the plain pass's unless given. `notes` become warnings. Counters that
    cannot be attached are left out with a warning, or raise InputError with `counters_required`
    (the user named the CSV)."""
    notes = list(notes or [])
    run_json = run.run_json()
    # merge() adopts the nsys profile; the torch profile keeps its own frames (for callsites).
    stack_profiles = [torch_profile] if torch_profile is not None and nsys_profile is not None else []
    profile, facts = merged_profile(run, torch_profile, nsys_profile, ncu_csv, notes=notes,
                                    counters_required=counters_required)
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
    job_passes = run_json.get("passes") or (RunDir(run.path.parent).run_json().get("passes")
                                            if run.path.name.startswith("rank-") else None) or []
    profile.extras["pass_status"] = {p["name"]: p.get("status") for p in job_passes}
    if baseline_step_ms is None:
        baseline_step_ms = next((p.get("step_time_ms") for p in passes if p["name"] == "plain"), None)
    results = analyze_profile(profile, workload=workload, tools=tools, passes=passes,
                              extra_warnings=list(run_json.get("mode_reasons") or [])
                              + list(facts.get("warnings") or []) + notes,
                              facts=facts, baseline_step_ms=baseline_step_ms,
                              calibration=read_calibration(run.path), script=_script(run_json),
                              script_is_module=bool((run_json.get("target") or {}).get("is_module")),
                              stack_profiles=stack_profiles)
    if results["timing"].get("baseline_step_time_ms") is not None:
        results["timing"]["baseline_step_times_ms"] = plain_step_samples_ms(run)
    results["artifacts"] = run_artifacts(run)
    return results


def plain_step_samples_ms(run: RunDir) -> list[float]:
    """The plain pass's step durations from its step ends (host clock, offsets from the window's start):
    `hybrid compare` tests on these where both runs have them, free of any collector's slowdown."""
    ends = (run.read_inject("plain") or {}).get("step_end_ns") or []
    if not isinstance(ends, list):
        return []
    starts = [0, *ends[:-1]] if ends else []
    if not all(isinstance(end, int) and end > start for start, end in zip(starts, ends, strict=True)):
        return []  # a damaged inject.json: no samples rather than negative steps
    return [round((end - start) / 1e6, 6) for start, end in zip(starts, ends, strict=True)]


def run_artifacts(run: RunDir) -> dict[str, str]:
    """The raw files the run kept, relative to its directory, for the commands that open them in their
    own tools (hybrid.report.views)."""
    from nsight import ncu

    found = {"torch_trace": run.torch_trace(), "nsys_report": run.path / "nsys" / "profile.nsys-rep",
             "nsys_export": run.nsys_export(), "ncu_report": run.path / "ncu" / ncu.REPORT_NAME}
    return {key: path.relative_to(run.path).as_posix() for key, path in found.items()
            if path is not None and path.is_file()}


def read_calibration(run_path: Path) -> dict | None:
    """The speedups `python -m hybrid.replay.calibrate` measured for this run, if it ran."""
    import json

    from hybrid.replay.calibrate import CALIBRATION_FILE

    try:
        return json.loads((run_path / CALIBRATION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _script(run_json: dict) -> str | None:
    """The script as the run was given it; for `-m pkg.mod`, pkg/mod.py."""
    target = run_json.get("target") or {}
    argv = target.get("argv") or []
    if not argv:
        return None
    return str(argv[0]).replace(".", "/") + ".py" if target.get("is_module") else str(argv[0])


def analyze_export(export: Path, *, ncu_csv: Path | None = None, step_range: str | None = None) -> dict:
    """Analyze an nsys SQLite export made by the user's own `nsys profile` (and optionally an ncu CSV)."""
    from hybrid.nsys_pass import load_nsys_export

    profile = load_nsys_export(export, step_range=step_range)
    if not len(profile.kernels):
        raise _no_kernels(export, profile)
    if ncu_csv is not None:
        profile = _attach_ncu(profile, ncu_csv)
    workload = {"command": f"nsys export {export.name}", "steps_measured": profile.measured_steps,
                "warmup_steps": None, **step_fields(profile)}
    nsys_facts = profile.extras.get("nsys", {})
    results = analyze_profile(profile, workload=workload,
                              tools={"nsys_version": nsys_facts.get("product_version")}, passes=[])
    # Relative to the export's folder, where its .nsys-rep normally lies.
    report = export.with_suffix(".nsys-rep")
    results["artifacts"] = {"nsys_export": export.name, **({"nsys_report": report.name} if report.is_file() else {})}
    return results
