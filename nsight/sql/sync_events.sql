-- Synchronization as CUPTI saw it on the device side, summed per kind (stream, event, context
-- sync, stream-wait-event); the host blocked intervals come from runtime_calls.sql.
-- requires: CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, ENUM_CUPTI_SYNC_TYPE
SELECT
    coalesce(t.label, 'Unknown') AS sync_type,
    count(*) AS events,
    sum(s.end - s.start) AS total_ns
FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION AS s
LEFT JOIN ENUM_CUPTI_SYNC_TYPE AS t ON t.id = s.syncType
GROUP BY 1
ORDER BY total_ns DESC
