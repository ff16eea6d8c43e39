-- NVTX push/pop (eventType 59) and start/end (60) ranges with their text and domain name. The
-- domain name lives in the domain-create row (eventType 75) of the same process; domainId 0 is
-- the default domain and has no such row. Unclosed ranges (end NULL) are left out.
-- requires: NVTX_EVENTS, StringIds
WITH domains AS (
    SELECT
        domainId AS domain_id,
        globalTid & 0xFFFFFFFFFF000000 AS global_pid,
        max(coalesce(d.text, ds.value)) AS name
    FROM NVTX_EVENTS AS d
    LEFT JOIN StringIds AS ds ON ds.id = d.textId
    WHERE d.eventType = 75
    GROUP BY 1, 2
)
SELECT
    n.start AS start_ns,
    n.end AS end_ns,
    coalesce(n.text, s.value) AS text,
    coalesce(n.globalTid, -1) AS global_tid,
    dom.name AS domain
FROM NVTX_EVENTS AS n
LEFT JOIN StringIds AS s ON s.id = n.textId
LEFT JOIN domains AS dom
    ON dom.domain_id = n.domainId
   AND dom.global_pid = (n.globalTid & 0xFFFFFFFFFF000000)
WHERE n.eventType IN (59, 60)
  AND n.end IS NOT NULL
  AND n.end >= :t0 AND n.start <= :t1
