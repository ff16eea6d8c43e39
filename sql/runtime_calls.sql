-- Host CUDA API calls that launch work, copy, set memory or wait for the device (runtime and
-- driver APIs alike), numeric columns only; the call names come back through strings.sql.
-- Everything else (cuGetProcAddress, attribute queries) is left in the database.
-- requires: CUPTI_ACTIVITY_KIND_RUNTIME, StringIds
WITH wanted AS (
    SELECT id FROM StringIds
    WHERE value LIKE 'cudaLaunch%' OR value LIKE 'cuLaunch%'
       OR value LIKE 'cudaGraphLaunch%' OR value LIKE 'cuGraphLaunch%'
       OR value LIKE 'cudaMemcpy%' OR value LIKE 'cuMemcpy%'
       OR value LIKE 'cudaMemset%' OR value LIKE 'cuMemset%'
       OR value LIKE '%Synchronize%'
)
SELECT
    nameId AS name_id,
    start AS start_ns,
    end AS end_ns,
    coalesce(correlationId, -1) AS correlation,
    coalesce(globalTid, -1) AS global_tid
FROM CUPTI_ACTIVITY_KIND_RUNTIME
WHERE nameId IN wanted
