-- What the export recorded about each GPU (one row per device).
-- requires: TARGET_INFO_GPU
SELECT
    id AS device,
    name,
    smCount AS sm_count,
    clockRate AS clock_hz,
    memoryBandwidth AS memory_bandwidth_bytes_per_s,
    l2CacheSize AS l2_bytes,
    totalMemory AS memory_bytes,
    computeMajor AS cc_major,
    computeMinor AS cc_minor,
    maxWarpsPerSm AS max_warps_per_sm
FROM TARGET_INFO_GPU
ORDER BY id
