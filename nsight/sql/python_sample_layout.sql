-- The payload layout nsys declares for its Python samples: the entries (name, byte offset, NVTX
-- payload entry type) of the NVTX payload schemas of its Python stack domains (sql/python_samples.sql),
-- and each schema's static size. nsight/python_samples.py checks them against the layout it decodes.
-- requires: NVTX_EVENTS, NVTX_PAYLOAD_SCHEMAS, NVTX_PAYLOAD_SCHEMA_ENTRIES
WITH sampling AS (
    SELECT DISTINCT domainId AS domain_id
    FROM NVTX_EVENTS
    WHERE eventType = 75 AND text IN ('Python Periodic Sampling', 'Python Backtrace on CUDA')
)
SELECT
    e.name AS name,
    coalesce(e.offset, 0) AS offset,
    e.type AS type,
    s.payloadSize AS payload_size
FROM NVTX_PAYLOAD_SCHEMA_ENTRIES AS e
JOIN NVTX_PAYLOAD_SCHEMAS AS s ON s.domainId = e.domainId AND s.schemaId = e.schemaId
WHERE e.domainId IN (SELECT domain_id FROM sampling)
ORDER BY e.schemaId, e.idx
