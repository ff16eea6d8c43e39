"""ncu coverage on a real H200 capture (resnet50 b32, tests/fixtures/models/resnet50-ncu): why the
NVTX step filter profiled only 29% of the step's GPU time, and that attach_counters gives every
launch of a profiled (function, grid, block) its counters.

The thread analysis is plain SQL over the export, independent of the loader."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from hybrid.load.ncu_match import attach_counters, select_kernels
from hybrid.load.nsys_export import load_nsys_export
from hybrid.profile import MATCH_CONFIG, MATCH_LAUNCH, MATCH_NAME
from nsight.ncu import function_base_name, kernel_signature
from nsight.ncu_csv import parse_ncu_csv

FIXTURE = Path(__file__).parent / "fixtures" / "models" / "resnet50-ncu"
COUNTERS = FIXTURE / "ncu" / "counters.csv"
CONFIG = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
BASE_KEY = ["base", *CONFIG]
KEY = ["signature", *CONFIG]

# Each kernel with the thread that launched it and whether that thread is the one that pushed the
# injector's step ranges (the Python thread).
LAUNCHES_SQL = """
SELECT s.value AS name, k.gridX AS grid_x, k.gridY AS grid_y, k.gridZ AS grid_z,
       k.blockX AS block_x, k.blockY AS block_y, k.blockZ AS block_z,
       r.globalTid IN (SELECT n.globalTid FROM NVTX_EVENTS n WHERE n.eventType = 59
                       AND coalesce(n.text, (SELECT value FROM StringIds WHERE id = n.textId)) = 'step 0')
         AS on_step_thread
FROM CUPTI_ACTIVITY_KIND_KERNEL k
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
  ON r.correlationId = k.correlationId AND (r.globalTid & 0xFFFFFFFFFF000000) = k.globalPid
JOIN StringIds s ON s.id = k.demangledName
"""


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("resnet50-ncu")
    path = folder / "profile.sqlite"
    with gzip.open(FIXTURE / "nsys" / "profile.sqlite.gz", "rb") as packed, path.open("wb") as out:
        shutil.copyfileobj(packed, out)
    shutil.copyfile(FIXTURE / "nsys" / "inject.json", folder / "inject.json")
    return path


@pytest.fixture(scope="module")
def profile(export):
    return load_nsys_export(export)


@pytest.fixture(scope="module")
def counters():
    return parse_ncu_csv(COUNTERS)


def _keys(frame: pd.DataFrame) -> pd.DataFrame:
    names = frame["name"].astype(str)
    return frame.assign(base=names.map(function_base_name), signature=names.map(kernel_signature))


def _key_set(frame: pd.DataFrame, key: list[str] = KEY) -> set[tuple]:
    return set(map(tuple, _keys(frame)[key].to_numpy().tolist()))


def test_nvtx_step_filter_profiled_only_the_python_threads_launches(export, counters):
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as db:
        launches = _keys(pd.read_sql_query(LAUNCHES_SQL, db))
    selected = {
        function_base_name(n) for n in json.loads((FIXTURE / "ncu" / "selected_kernels.json").read_text())
    }
    launches = launches[launches["base"].isin(selected)]
    # Each ncu name is one nsys name reduced alike (the two demangle differently).
    assert _key_set(counters.frame) <= set(map(tuple, launches[KEY].to_numpy().tolist()))
    # ncu's per-launch-config filter takes one launch per (function base name, grid, block), the name
    # being what --kernel-name-base function makes of it; compare on that key.
    profiled = _key_set(counters.frame, BASE_KEY)
    python_thread = set(
        map(tuple, launches.loc[launches["on_step_thread"] == 1, BASE_KEY].to_numpy().tolist())
    )
    other_threads = set(
        map(tuple, launches.loc[launches["on_step_thread"] == 0, BASE_KEY].to_numpy().tolist())
    )
    # The backward pass runs on PyTorch's autograd thread, outside the thread-local push/pop range.
    assert len(other_threads - python_thread) >= 30
    # Every selected configuration launched on the step's thread was profiled; of those launched only
    # from another thread, none was.
    assert python_thread <= profiled
    assert not (other_threads - python_thread) & profiled
    assert profiled <= python_thread


def test_every_launch_of_a_profiled_configuration_gets_counters(profile, counters):
    assert str(profile.kernels["name"].dtype) == "category"  # as the real loader gives it
    attached = attach_counters(profile, counters)
    ncu = attached.extras["ncu"]
    kernels = _keys(profile.kernels.reset_index(drop=True))
    counter_keys = _keys(counters.frame)[KEY].to_numpy().tolist()
    levels = attached.kernel_counters["counter_match"]
    rows = attached.kernel_counters["counter_row"]
    counter_key_set = _key_set(counters.frame)
    profiled = pd.Series([tuple(k) in counter_key_set for k in kernels[KEY].to_numpy().tolist()])
    assert profiled.sum() > 0
    assert levels[profiled].isin([MATCH_LAUNCH, MATCH_CONFIG]).all()
    # ...and each takes a counter row of its own configuration.
    for row, key in zip(rows[profiled], kernels.loc[profiled, KEY].to_numpy().tolist(), strict=False):
        assert counter_keys[row] == key
    assert not levels[~profiled].isin([MATCH_LAUNCH, MATCH_CONFIG]).any()

    durations = kernels["end_ns"] - kernels["start_ns"]
    measured = kernels["step"] >= 0
    expected_pct = 100.0 * durations[measured & profiled].sum() / durations[measured].sum()
    assert ncu["covered_gpu_time_pct"] == pytest.approx(expected_pct, abs=0.01)
    # The H200 run reported 29.4% when matching on base names, which also lent counters across
    # instantiations (next test): 5.3% of the GPU time.
    assert ncu["covered_gpu_time_pct"] == pytest.approx(24.1, abs=0.1)
    assert ncu["name_only_gpu_time_pct"] == pytest.approx(5.3, abs=0.1)
    assert ncu["unmatched_counter_rows"] == 0
    assert any("ncu counters cover only" in w for w in attached.warnings)
    not_profiled = {function_base_name(k["name"]) for k in ncu["kernels_not_profiled"]}
    assert {"dgrad_engine", "wgrad_alg0_engine"} <= not_profiled
    assert all(k["gpu_time_ns"] > 0 for k in ncu["kernels_not_profiled"])


def test_selection_from_the_categorical_kernel_frame(profile):
    chosen = select_kernels(profile.kernels)
    assert chosen == json.loads((FIXTURE / "ncu" / "selected_kernels.json").read_text())


def test_instantiations_launched_alike_do_not_share_counters(profile, counters):
    """Two instantiations of one template with the same grid and block (e.g. vectorized_elementwise_kernel
    for add and for fill) are different kernels: the one ncu did not profile gets no counters of the other."""
    attached = attach_counters(profile, counters)
    kernels = _keys(profile.kernels.reset_index(drop=True))
    levels = attached.kernel_counters["counter_match"]
    base_keys, signature_keys = _key_set(counters.frame, BASE_KEY), _key_set(counters.frame)
    same_base = pd.Series([tuple(k) in base_keys for k in kernels[BASE_KEY].to_numpy().tolist()])
    same_signature = pd.Series([tuple(k) in signature_keys for k in kernels[KEY].to_numpy().tolist()])
    other_instantiation = same_base & ~same_signature
    assert other_instantiation.sum() > 0
    assert (kernels.loc[other_instantiation, "base"] == "vectorized_elementwise_kernel").any()
    assert (levels[other_instantiation] == MATCH_NAME).all()
