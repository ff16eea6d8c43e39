-- Device memsets.
-- requires: CUPTI_ACTIVITY_KIND_MEMSET
SELECT
    start AS start_ns,
    end AS end_ns,
    bytes AS bytes,
    streamId AS stream,
    coalesce(correlationId, -1) AS correlation,
    coalesce(globalPid, -1) AS global_pid
FROM CUPTI_ACTIVITY_KIND_MEMSET
