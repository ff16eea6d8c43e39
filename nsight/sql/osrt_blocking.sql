-- OS runtime calls (poll, read, futex, sem_wait, ...) that lasted at least :min_ns and started
-- within [:start_ns, :end_ns] (the measured steps), per call name: where host threads sat blocked
-- (a data loader waiting on workers, a lock held elsewhere).
-- requires: OSRT_API, StringIds
SELECT
    s.value AS name,
    count(*) AS calls,
    sum(o.end - o.start) AS total_ns,
    max(o.end - o.start) AS max_ns
FROM OSRT_API AS o
JOIN StringIds AS s ON s.id = o.nameId
WHERE o.end - o.start >= :min_ns
  AND o.start BETWEEN :start_ns AND :end_ns
GROUP BY s.value
ORDER BY total_ns DESC
LIMIT :limit
