-- Kernel executions, numeric columns only, as columns: one row whose every value is a
-- comma-separated list of integers in the same row order. group_concat runs inside SQLite, so a
-- million kernels never become a million Python tuples; names stay StringIds ids (strings.sql
-- resolves the few distinct ones). Every expression must be non-NULL: group_concat skips NULLs,
-- which would misalign the lists.
-- :t0 and :t1 bound the analyzed window (rows starting in it); the whole capture unless it is huge.
-- requires: CUPTI_ACTIVITY_KIND_KERNEL
SELECT
    group_concat(start) AS start_ns,
    group_concat(end) AS end_ns,
    group_concat(streamId) AS stream,
    group_concat(deviceId) AS device,
    group_concat(coalesce(correlationId, -1)) AS correlation,
    group_concat(coalesce(globalPid, -1)) AS global_pid,
    group_concat(demangledName) AS name_id,
    group_concat(gridX) AS grid_x,
    group_concat(gridY) AS grid_y,
    group_concat(gridZ) AS grid_z,
    group_concat(blockX) AS block_x,
    group_concat(blockY) AS block_y,
    group_concat(blockZ) AS block_z,
    group_concat(registersPerThread) AS registers,
    group_concat(staticSharedMemory + dynamicSharedMemory) AS shared_bytes
FROM CUPTI_ACTIVITY_KIND_KERNEL
WHERE start BETWEEN :t0 AND :t1
