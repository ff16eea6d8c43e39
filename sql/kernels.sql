-- Kernel executions, numeric columns only: names stay StringIds ids (strings.sql resolves the few
-- distinct ones), so a million kernels cost no Python string each.
-- requires: CUPTI_ACTIVITY_KIND_KERNEL
SELECT
    start AS start_ns,
    end AS end_ns,
    streamId AS stream,
    deviceId AS device,
    coalesce(correlationId, -1) AS correlation,
    coalesce(globalPid, -1) AS global_pid,
    demangledName AS name_id,
    gridX AS grid_x, gridY AS grid_y, gridZ AS grid_z,
    blockX AS block_x, blockY AS block_y, blockZ AS block_z,
    registersPerThread AS registers,
    staticSharedMemory + dynamicSharedMemory AS shared_bytes
FROM CUPTI_ACTIVITY_KIND_KERNEL
