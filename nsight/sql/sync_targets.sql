-- The stream each synchronization or stream-wait call named, by the call's correlation id, as
-- columns (see kernels.sql). The record's own syncType label is not used: nsys 2025.3 files
-- cudaStreamSynchronize under "Stream wait sync"; the call's API name says what it was.
-- requires: CUPTI_ACTIVITY_KIND_SYNCHRONIZATION
SELECT
    group_concat(coalesce(correlationId, -1)) AS correlation,
    group_concat(coalesce(globalPid, -1)) AS global_pid,
    group_concat(streamId) AS stream
FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION
WHERE start BETWEEN :t0 AND :t1
