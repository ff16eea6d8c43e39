-- Python stacks nsys recorded in [:start_ns, :end_ns]: the marks (eventType 34) of its NVTX domains
-- "Python Periodic Sampling" (--python-sampling) and "Python Backtrace on CUDA" (--python-backtrace,
-- taken when a traced CUDA call starts), each with its thread and its stack as a binary payload
-- (decoded by nsight/python_samples.py; NULL when the export left the payloads out). A domain is
-- named in its domain-create row (eventType 75) of the same process.
-- requires: NVTX_EVENTS, StringIds
WITH sampling AS (
    SELECT DISTINCT d.domainId AS domain_id, d.globalTid & 0xFFFFFFFFFF000000 AS global_pid
    FROM NVTX_EVENTS AS d
    LEFT JOIN StringIds AS ds ON ds.id = d.textId
    WHERE d.eventType = 75
      AND coalesce(d.text, ds.value) IN ('Python Periodic Sampling', 'Python Backtrace on CUDA')
)
SELECT
    n.start AS start_ns,
    n.globalTid AS global_tid,
    n.binaryData AS payload
FROM NVTX_EVENTS AS n
JOIN sampling AS d
  ON d.domain_id = n.domainId AND d.global_pid = (n.globalTid & 0xFFFFFFFFFF000000)
WHERE n.eventType = 34
  AND n.start BETWEEN :start_ns AND :end_ns
ORDER BY n.globalTid, n.start
