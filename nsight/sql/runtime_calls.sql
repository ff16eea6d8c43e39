-- Host CUDA API calls that launch work, copy, set memory, wait for the device, record an event or
-- make a stream wait for one (runtime and driver APIs alike), as columns (see kernels.sql); the call
-- names come back through strings.sql. Everything else (cuGetProcAddress, attribute queries) is
-- left in the database.
-- :t0 and :t1 bound the analyzed window (rows starting in it); the whole capture unless it is huge.
-- requires: CUPTI_ACTIVITY_KIND_RUNTIME, StringIds
WITH wanted AS (
    SELECT id FROM StringIds
    WHERE value LIKE 'cudaLaunch%' OR value LIKE 'cuLaunch%'
       OR value LIKE 'cudaGraphLaunch%' OR value LIKE 'cuGraphLaunch%'
       OR value LIKE 'cudaMemcpy%' OR value LIKE 'cuMemcpy%'
       OR value LIKE 'cudaMemset%' OR value LIKE 'cuMemset%'
       OR value LIKE '%Synchronize%'
       OR value LIKE 'cudaEventRecord%' OR value LIKE 'cuEventRecord%'
       OR value LIKE 'cudaStreamWaitEvent%' OR value LIKE 'cuStreamWaitEvent%'
)
SELECT
    group_concat(nameId) AS name_id,
    group_concat(start) AS start_ns,
    group_concat(end) AS end_ns,
    group_concat(coalesce(correlationId, -1)) AS correlation,
    group_concat(coalesce(globalTid, -1)) AS global_tid
FROM CUPTI_ACTIVITY_KIND_RUNTIME
WHERE nameId IN wanted AND start BETWEEN :t0 AND :t1
