-- Earliest and latest start of the kernels in a rowid range (a range scan: it reads those rows only).
-- requires: CUPTI_ACTIVITY_KIND_KERNEL
SELECT min(start) AS first_start_ns, max(start) AS last_start_ns
FROM CUPTI_ACTIVITY_KIND_KERNEL
WHERE rowid BETWEEN :first_row AND :last_row
