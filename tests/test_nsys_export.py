"""load_nsys_export on the real H200 capture, checked against SQL written here, independent of
sql/ and of the loader (kernel <-> launch join, NVTX containment), and against hand counts from
the fixture's README (5 pageable 32 MiB HtoD copies, 5 DtoH, a .item() sync per step)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.errors import InputError
from hybrid.load.nsys_export import explain_no_kernels, load_nsys_export

FIXTURE = Path(__file__).parent / "fixtures" / "h200-probe" / "nsys_matmul_copy.sqlite"
ROOT = Path(__file__).resolve().parents[1]

# Kernels whose launch call started inside each NVTX range, by the book: kernel and runtime row
# share correlationId and process; the range encloses the launch on the launching thread.
KERNELS_PER_RANGE_SQL = """
SELECT s.value AS step_name, count(*) AS kernels, sum(k.end - k.start) AS kernel_ns
FROM CUPTI_ACTIVITY_KIND_KERNEL k
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
  ON r.correlationId = k.correlationId AND (r.globalTid & 0xFFFFFFFFFF000000) = k.globalPid
JOIN NVTX_EVENTS n
  ON n.globalTid = r.globalTid AND n.start <= r.start AND r.start <= n.end AND n.eventType = 59
JOIN StringIds s ON s.id = n.textId
GROUP BY s.value ORDER BY n.start
"""


def _sql(path: Path, query: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(query, params).fetchall()


def _copy(tmp_path: Path, edit: str | None = None) -> Path:
    path = tmp_path / "export.sqlite"
    shutil.copyfile(FIXTURE, path)
    if edit:
        with sqlite3.connect(path) as db:
            db.executescript(edit)
    return path


@pytest.fixture(scope="module")
def profile():
    return load_nsys_export(FIXTURE, step_range="step")


def test_steps_are_the_five_user_ranges(profile):
    expected = _sql(
        FIXTURE,
        "SELECT s.value, n.start, n.end FROM NVTX_EVENTS n JOIN StringIds s "
        "ON s.id = n.textId ORDER BY n.start",
    )
    assert profile.step_source == "nvtx:step"
    assert list(profile.steps["step"]) == [0, 1, 2, 3, 4]
    assert (
        list(zip(profile.steps["name"], profile.steps["start_ns"], profile.steps["end_ns"], strict=False))
        == expected
    )
    assert any("--step-range" in w for w in profile.warnings)


def test_kernels_and_kernel_time_per_step_match_independent_sql(profile):
    expected = _sql(FIXTURE, KERNELS_PER_RANGE_SQL)
    measured = (
        profile.kernels[profile.kernels["step"] >= 0]
        .groupby("step")
        .agg(kernels=("start_ns", "size"), kernel_ns=("end_ns", "sum"))
    )
    kernel_ns = (
        (profile.kernels["end_ns"] - profile.kernels["start_ns"]).groupby(profile.kernels["step"]).sum()
    )
    assert [e[1] for e in expected] == list(measured["kernels"]) == [4, 4, 4, 4, 4]
    assert [e[2] for e in expected] == [int(kernel_ns[s]) for s in range(5)]
    # The two randn kernels before the loop belong to no step.
    assert int((profile.kernels["step"] == -1).sum()) == 2
    assert len(profile.kernels) == _sql(FIXTURE, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]


def test_kernel_columns_match_the_kernel_table(profile):
    rows = _sql(
        FIXTURE,
        """
        SELECT k.start, s.value, k.gridX, k.blockX, k.registersPerThread,
               k.staticSharedMemory + k.dynamicSharedMemory, r.start
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = k.correlationId AND (r.globalTid & 0xFFFFFFFFFF000000) = k.globalPid
        ORDER BY k.start""",
    )
    k = profile.kernels
    assert (
        list(
            zip(
                k["start_ns"],
                k["name"].astype(str),
                k["grid_x"],
                k["block_x"],
                k["registers"],
                k["shared_bytes"],
                k["launch_ns"],
                strict=False,
            )
        )
        == rows
    )
    gemm = k[k["name"].astype(str).str.startswith("nvjet")]
    assert len(gemm) == 5 and set(gemm["shared_bytes"]) == {213188} and set(gemm["registers"]) == {168}
    assert k["layer"].isna().all()  # the fixture has no module ranges


def test_copies_are_five_pageable_htod_and_five_dtoh(profile):
    copies = profile.memcpys
    htod, dtoh = copies[copies["kind"] == "HtoD"], copies[copies["kind"] == "DtoH"]
    assert len(copies) == 10
    assert list(htod["bytes"]) == [32 * 1024 * 1024] * 5
    assert list(htod["host_pinned"]) == [False] * 5  # h = torch.randn(...) on the host is pageable
    assert len(dtoh) == 5 and list(dtoh["step"]) == [0, 1, 2, 3, 4]
    # .item() copies through PyTorch's pinned staging buffer
    assert list(dtoh["host_pinned"]) == [True] * 5
    assert list(htod["step"]) == [0, 1, 2, 3, 4]


def test_syncs_are_the_host_sync_calls(profile):
    ((stream_syncs,),) = _sql(
        FIXTURE,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
        "ON s.id = r.nameId WHERE s.value LIKE 'cudaStreamSynchronize%'",
    )
    syncs = profile.syncs
    assert stream_syncs == 10
    assert list(syncs["kind"]).count("stream") == stream_syncs
    # torch.cuda.synchronize() after the loop: a device sync outside every step
    device = syncs[syncs["kind"] == "device"]
    assert len(device) == 1 and int(device["step"].iloc[0]) == -1
    assert (syncs[syncs["kind"] == "stream"].groupby("step").size() == 2).all()  # HtoD .cuda(), .item()
    assert (syncs["end_ns"] > syncs["start_ns"]).all()


def test_launches_memsets_and_device(profile):
    ((launch_calls,),) = _sql(
        FIXTURE,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
        "ON s.id = r.nameId WHERE s.value LIKE 'cudaLaunchKernel%' "
        "OR s.value LIKE 'cuLaunchKernel%'",
    )
    assert len(profile.launches) == launch_calls == 22
    assert set(profile.launches["correlation"]) == set(profile.kernels["correlation"])
    assert len(profile.memsets) == 10 and (profile.memsets["step"] >= 0).all()
    gpu = _sql(
        FIXTURE,
        "SELECT name, smCount, clockRate, memoryBandwidth, l2CacheSize, totalMemory FROM TARGET_INFO_GPU",
    )[0]
    device = profile.device
    assert (
        device.name,
        device.sm_count,
        device.sm_clock_hz,
        device.memory_bandwidth_bytes_per_s,
        device.l2_bytes,
        device.memory_bytes,
    ) == gpu
    assert device.compute_capability == "9.0" and device.source == "measured:nsys"
    assert set(profile.sources.values()) == {"measured:nsys"}
    profile.validate()


def test_extras_carry_export_facts(profile):
    nsys = profile.extras["nsys"]
    assert nsys["schema_version"] == "3.20.3" and nsys["product_version"] == "2025.3.2.0"
    ((overhead,),) = _sql(FIXTURE, "SELECT sum(end - start) FROM PROFILER_OVERHEAD")
    assert nsys["profiler_overhead_ns"] == overhead
    assert nsys["kernels_without_launch_record"] == 0


def test_repeating_ranges_are_found_without_step_range():
    guessed = load_nsys_export(FIXTURE)
    assert guessed.step_source == "pattern"
    assert list(guessed.steps["name"]) == ["step0", "step1", "step2", "step3", "step4"]
    assert any("guessed" in w for w in guessed.warnings)


def test_steady_window_when_nothing_repeats(tmp_path):
    """Five iterations are too few to call periodic: the capture from the first kernel launch on is one
    range, labeled so, with low confidence and a warning; the time before that launch is excluded."""
    profile = load_nsys_export(_copy(tmp_path, "DELETE FROM NVTX_EVENTS;"))
    assert (profile.step_source, profile.step_confidence) == ("steady-window", "low")
    assert len(profile.steps) == 1 and (profile.kernels["step"] == 0).all()
    ((first_launch,),) = _sql(
        FIXTURE,
        "SELECT min(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
        "CUPTI_ACTIVITY_KIND_KERNEL k ON r.correlationId = k.correlationId",
    )
    assert profile.steps["start_ns"].iloc[0] == first_launch
    assert any("analyzed as one range" in w for w in profile.warnings)


def test_our_own_step_and_module_ranges(tmp_path):
    """The fixture's ranges relabelled the way the injector writes them (domain `hybrid`,
    `step N`), plus one module range in domain `hybrid.modules` around step 1's GEMM launch."""
    ((tid,),) = _sql(FIXTURE, "SELECT DISTINCT globalTid FROM NVTX_EVENTS")
    ((gemm_launch,),) = _sql(
        FIXTURE,
        """
        SELECT r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
        WHERE s.value LIKE 'nvjet%' ORDER BY k.start LIMIT 1 OFFSET 1""",
    )
    path = _copy(
        tmp_path,
        f"""
        UPDATE NVTX_EVENTS SET domainId = 1,
            text = 'step ' || (SELECT substr(value, 5) FROM StringIds WHERE id = textId), textId = NULL;
        INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
            VALUES (0, NULL, 75, 'hybrid', {tid}, 1), (0, NULL, 75, 'hybrid.modules', {tid}, 2),
                   ({gemm_launch - 100}, {gemm_launch + 100}, 59, 'layer1.0.conv1', {tid}, 2),
                   ({gemm_launch - 1000}, {gemm_launch + 1000}, 59, 'layer1', {tid}, 2);""",
    )
    profile = load_nsys_export(path)
    assert profile.step_source == "nvtx:hybrid" and profile.warnings == []
    assert list(profile.steps["name"]) == [f"step {i}" for i in range(5)]
    layered = profile.kernels[profile.kernels["layer"].notna()]
    assert len(layered) == 1 and layered["layer"].iloc[0] == "layer1.0.conv1"
    assert int(layered["step"].iloc[0]) == 1 and int(layered["launch_ns"].iloc[0]) == gemm_launch
    layers = profile.layers.sort_values("depth")
    assert list(layers["name"]) == ["layer1", "layer1.0.conv1"] and list(layers["depth"]) == [0, 1]
    assert list(layers["step"]) == [1, 1]


def test_unknown_step_range_names_the_ranges_it_saw():
    with pytest.raises(InputError, match="no NVTX range is named 'train_step'.*'step0'"):
        load_nsys_export(FIXTURE, step_range="train_step")


def test_run_directory_is_resolved_and_missing_export_is_an_input_error(tmp_path):
    run = tmp_path / "run"
    (run / "nsys").mkdir(parents=True)
    with pytest.raises(InputError, match="directory without an Nsight Systems export") as info:
        load_nsys_export(run)
    assert info.value.exit_code == 2
    shutil.copyfile(FIXTURE, run / "nsys" / "profile.sqlite")
    assert len(load_nsys_export(run).kernels) == 22


def test_text_file_renamed_sqlite(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("kernel timings, see the spreadsheet\n")
    with pytest.raises(InputError, match="is not an SQLite database") as info:
        load_nsys_export(path)
    assert "nsys export --type sqlite" in info.value.fix


def test_empty_files_and_databases(tmp_path):
    empty_file = tmp_path / "empty.sqlite"
    empty_file.touch()
    with pytest.raises(InputError, match=r"is empty \(0 bytes\)"):
        load_nsys_export(empty_file)
    no_tables = tmp_path / "no_tables.sqlite"
    with sqlite3.connect(no_tables) as db:
        db.execute("CREATE TABLE t (x)")
        db.execute("DROP TABLE t")
    with pytest.raises(InputError, match="not an Nsight Systems export.*no tables"):
        load_nsys_export(no_tables)


def test_foreign_sqlite(tmp_path):
    path = tmp_path / "app.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER, name TEXT)")
        db.execute("CREATE TABLE orders (id INTEGER, total REAL)")
    with pytest.raises(
        InputError,
        match=r"not an Nsight Systems export \(it lacks StringIds, "
        r"META_DATA_EXPORT; it has orders, users\)",
    ):
        load_nsys_export(path)


def test_export_without_kernel_table(tmp_path):
    profile = load_nsys_export(_copy(tmp_path, "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;"), step_range="step")
    assert profile.kernels.empty and len(profile.launches) == 22 and len(profile.memcpys) == 10
    assert any("no kernels" in w and "CUDA API calls were recorded" in w for w in profile.warnings)


def test_tables_created_lazily_mean_no_events(tmp_path):
    path = _copy(
        tmp_path,
        "DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY; DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET; "
        "DROP TABLE OSRT_API; DROP TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;",
    )
    profile = load_nsys_export(path, step_range="step")
    assert profile.memcpys.empty and profile.memsets.empty and len(profile.kernels) == 22
    assert profile.extras["nsys"]["sync_events"] == []
    profile.validate()


def test_unknown_schema_version_is_a_warning(tmp_path):
    path = _copy(
        tmp_path,
        "UPDATE META_DATA_EXPORT SET value = '4.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION';"
        "UPDATE META_DATA_EXPORT SET value = '4' WHERE name = 'EXPORT_SCHEMA_VERSION_MAJOR';",
    )
    profile = load_nsys_export(path, step_range="step")
    assert any("unknown nsys export schema version 4.0.0" in w for w in profile.warnings)
    assert len(profile.kernels) == 22


def test_empty_capture_explanations(tmp_path):
    nothing = _copy(
        tmp_path,
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL; DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME; "
        "DELETE FROM NVTX_EVENTS;",
    )
    assert "capture range never opened" in explain_no_kernels(nothing)
    elsewhere = tmp_path / "elsewhere.sqlite"
    shutil.copyfile(FIXTURE, elsewhere)
    with sqlite3.connect(elsewhere) as db:
        db.executescript("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL; DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME;")
    assert "process nsys did not trace" in explain_no_kernels(elsewhere)


def test_the_export_is_opened_read_only(tmp_path):
    path = _copy(tmp_path)
    path.chmod(0o444)
    before = path.read_bytes()
    load_nsys_export(path, step_range="step")
    assert path.read_bytes() == before


def test_importing_the_loader_does_not_import_torch():
    code = (
        "import sys, hybrid.load.nsys_export, nsight.nsys, nsight.sqlite_export; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


RESNET = Path(__file__).parent / "fixtures" / "models" / "resnet50-ncu" / "nsys"


def _resnet_pass_dir(tmp_path: Path, **inject_changes) -> Path:
    """The resnet50 nsys pass directory (export + the injector's inject.json), with inject.json
    edited as a script that ended early would have written it."""
    import gzip
    import json

    folder = tmp_path / "nsys"
    folder.mkdir()
    with (
        gzip.open(RESNET / "profile.sqlite.gz", "rb") as packed,
        (folder / "profile.sqlite").open("wb") as out,
    ):
        shutil.copyfileobj(packed, out)
    inject = json.loads((RESNET / "inject.json").read_text())
    (folder / "inject.json").write_text(json.dumps({**inject, **inject_changes}))
    return folder


def test_step_ranges_past_the_injectors_measured_steps_are_dropped(tmp_path):
    folder = _resnet_pass_dir(tmp_path, measured_steps=3, cut_short_step=3)
    full = load_nsys_export(folder / "profile.sqlite", measured_steps=5)
    assert list(full.steps["step"]) == [0, 1, 2, 3, 4]
    # Default: inject.json next to the export says 3 measured steps; ranges 3 and 4 are not steps.
    cut = load_nsys_export(folder / "profile.sqlite")
    assert list(cut.steps["step"]) == [0, 1, 2] and cut.step_source == "nvtx:hybrid"
    assert any("step range(s) 3, 4 dropped" in w for w in cut.warnings)
    assert (cut.kernels["step"] >= 0).sum() == (full.kernels["step"].between(0, 2)).sum()
    was_late = full.kernels["step"] >= 3
    assert (cut.kernels.loc[was_late, "step"] == -1).all()
    # An explicit count wins over inject.json.
    assert list(load_nsys_export(tmp_path / "nsys" / "profile.sqlite", measured_steps=4).steps["step"]) == [
        0,
        1,
        2,
        3,
    ]


def test_unreadable_inject_json_keeps_every_step_range(tmp_path):
    folder = _resnet_pass_dir(tmp_path)
    (folder / "inject.json").write_text("{ truncated")
    assert len(load_nsys_export(folder / "profile.sqlite").steps) == 5


def test_no_kernels_reason_reaches_the_caller(tmp_path):
    path = _copy(
        tmp_path,
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL; DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME; "
        "DELETE FROM NVTX_EVENTS;",
    )
    profile = load_nsys_export(path)
    reason = profile.extras["nsys"]["no_kernels_reason"]
    assert profile.kernels.empty and "capture range never opened" in reason
    assert any(reason in w for w in profile.warnings)
    assert load_nsys_export(FIXTURE, step_range="step").extras["nsys"]["no_kernels_reason"] is None
