-- The kernel table's first and last rows and their start times: O(1) through the rowid b-tree, so the
-- size of a huge export is known before any of it is read (nsys appends rows, so rowids are dense).
-- requires: CUPTI_ACTIVITY_KIND_KERNEL
SELECT
    (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 1) AS first_row,
    (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid DESC LIMIT 1) AS last_row,
    (SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 1) AS first_start_ns,
    (SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid DESC LIMIT 1) AS last_start_ns
