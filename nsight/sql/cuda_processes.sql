-- Processes that made CUDA API calls, with how many: tells "nothing was captured" from "the work
-- ran in another process" when a capture has no kernels.
-- requires: CUPTI_ACTIVITY_KIND_RUNTIME
SELECT
    (globalTid >> 24) & 0xFFFFFF AS pid,
    count(*) AS calls
FROM CUPTI_ACTIVITY_KIND_RUNTIME
GROUP BY 1
