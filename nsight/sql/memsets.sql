-- Device memsets, as columns (see kernels.sql).
-- requires: CUPTI_ACTIVITY_KIND_MEMSET
SELECT
    group_concat(start) AS start_ns,
    group_concat(end) AS end_ns,
    group_concat(bytes) AS bytes,
    group_concat(streamId) AS stream,
    group_concat(coalesce(correlationId, -1)) AS correlation,
    group_concat(coalesce(globalPid, -1)) AS global_pid
FROM CUPTI_ACTIVITY_KIND_MEMSET
WHERE start BETWEEN :t0 AND :t1
