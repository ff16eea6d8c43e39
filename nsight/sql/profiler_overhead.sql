-- Time nsys itself spent in the profiled process (buffer flushes, CUPTI setup), in total and
-- within [:start_ns, :end_ns] (the measured window).
-- requires: PROFILER_OVERHEAD
SELECT
    count(*) AS events,
    coalesce(sum(end - start), 0) AS total_ns,
    coalesce(sum(CASE WHEN start >= :start_ns AND end <= :end_ns THEN end - start ELSE 0 END), 0)
        AS in_window_ns
FROM PROFILER_OVERHEAD
