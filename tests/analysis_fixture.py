"""Builds a Profile from the real H200 nsys export with plain sqlite3, for the analysis tests, until
the nsys loader (hybrid.nsys_pass) lands. Kept deliberately literal: it reads the CUPTI tables and
assigns each event to the NVTX range `stepN` that enclosed its launch API call."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.profile import (KERNEL_COLUMNS, LAUNCH_COLUMNS, MEMCPY_COLUMNS, MEMSET_COLUMNS, STEP_COLUMNS,
                            SYNC_COLUMNS, DeviceInfo, Profile, conform)
from hybrid.provenance import MEASURED_NSYS

FIXTURES = Path(__file__).parent / "fixtures" / "h200-probe"
NSYS_SQLITE = FIXTURES / "nsys_matmul_copy.sqlite"
COPY_KIND = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
PAGEABLE, PINNED = 0, 1


def _query(conn: sqlite3.Connection, sql: str) -> pd.DataFrame:
    return pd.read_sql_query(sql, conn)


def _step_of(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    starts = steps["start_ns"].to_numpy()
    ends = steps["end_ns"].to_numpy()
    i = np.searchsorted(starts, times, side="right") - 1
    ok = (i >= 0) & (times < ends[np.clip(i, 0, None)])
    return np.where(ok, steps["step"].to_numpy()[np.clip(i, 0, None)], -1)


def load_fixture_profile(path: Path = NSYS_SQLITE) -> Profile:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    nvtx = _query(conn, "SELECT n.start, n.end, coalesce(n.text, s.value) AS text FROM NVTX_EVENTS n "
                        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 ORDER BY n.start")
    steps = pd.DataFrame({"step": nvtx["text"].str.replace("step", "").astype(int), "name": nvtx["text"],
                          "start_ns": nvtx["start"], "end_ns": nvtx["end"]})
    runtime = _query(conn, "SELECT r.start, r.end, r.correlationId AS correlation, r.globalTid AS tid, "
                           "s.value AS api FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId")
    runtime["step"] = _step_of(runtime["start"].to_numpy(), steps)
    api_start = runtime.set_index("correlation")["start"]
    api_step = runtime.set_index("correlation")["step"]

    k = _query(conn, "SELECT k.start, k.end, k.streamId, k.deviceId, k.correlationId, k.gridX, k.gridY, "
                     "k.gridZ, k.blockX, k.blockY, k.blockZ, k.registersPerThread, "
                     "k.staticSharedMemory + k.dynamicSharedMemory AS shared, s.value AS name "
                     "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName")
    kernels = pd.DataFrame({
        "name": k["name"], "start_ns": k["start"], "end_ns": k["end"], "stream": k["streamId"],
        "device": k["deviceId"], "correlation": k["correlationId"],
        "launch_ns": k["correlationId"].map(api_start).fillna(-1),
        "grid_x": k["gridX"], "grid_y": k["gridY"], "grid_z": k["gridZ"],
        "block_x": k["blockX"], "block_y": k["blockY"], "block_z": k["blockZ"],
        "registers": k["registersPerThread"], "shared_bytes": k["shared"],
        "step": k["correlationId"].map(api_step).fillna(-1), "layer": None})

    m = _query(conn, "SELECT start, end, streamId, bytes, copyKind, srcKind, dstKind, correlationId "
                     "FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    host_kind = np.where(m["copyKind"] == 1, m["srcKind"], m["dstKind"])
    memcpys = pd.DataFrame({
        "kind": m["copyKind"].map(COPY_KIND), "bytes": m["bytes"], "start_ns": m["start"], "end_ns": m["end"],
        "stream": m["streamId"],
        "host_pinned": pd.Series(host_kind).map({PAGEABLE: False, PINNED: True}).astype(object),
        "step": m["correlationId"].map(api_step).fillna(-1)})

    ms = _query(conn, "SELECT start, end, streamId, bytes, correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET")
    memsets = pd.DataFrame({"bytes": ms["bytes"], "start_ns": ms["start"], "end_ns": ms["end"],
                            "stream": ms["streamId"], "step": ms["correlationId"].map(api_step).fillna(-1)})

    sync_api = runtime[runtime["api"].str.contains("Synchronize")]
    syncs = pd.DataFrame({"kind": np.where(sync_api["api"].str.contains("Stream"), "stream", "device"),
                          "api": sync_api["api"], "start_ns": sync_api["start"], "end_ns": sync_api["end"],
                          "step": sync_api["step"]})
    launch_api = runtime[runtime["api"].str.contains("Launch")]
    launches = pd.DataFrame({"api": launch_api["api"], "start_ns": launch_api["start"], "end_ns": launch_api["end"],
                             "correlation": launch_api["correlation"], "tid": launch_api["tid"],
                             "step": launch_api["step"]})
    gpu = _query(conn, "SELECT name, smCount, clockRate, totalMemory, memoryBandwidth, l2CacheSize, "
                       "computeMajor, computeMinor, maxWarpsPerSm FROM TARGET_INFO_GPU").iloc[0]
    conn.close()
    device = DeviceInfo(name=gpu["name"], sm_count=int(gpu["smCount"]), sm_clock_hz=float(gpu["clockRate"]),
                        memory_bytes=int(gpu["totalMemory"]),
                        memory_bandwidth_bytes_per_s=float(gpu["memoryBandwidth"]),
                        l2_bytes=int(gpu["l2CacheSize"]),
                        compute_capability=f"{gpu['computeMajor']}.{gpu['computeMinor']}",
                        max_warps_per_sm=int(gpu["maxWarpsPerSm"]), source=MEASURED_NSYS)
    profile = Profile(steps=conform(steps, STEP_COLUMNS), kernels=conform(kernels, KERNEL_COLUMNS),
                      memcpys=conform(memcpys, MEMCPY_COLUMNS), memsets=conform(memsets, MEMSET_COLUMNS),
                      syncs=conform(syncs, SYNC_COLUMNS), launches=conform(launches, LAUNCH_COLUMNS),
                      device=device, step_source="nvtx:step", extras={"cuda_available": True})
    profile.sources = {name: MEASURED_NSYS for name in
                       ("steps", "kernels", "memcpys", "memsets", "syncs", "launches")}
    return profile
