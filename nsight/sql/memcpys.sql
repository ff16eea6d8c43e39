-- Device copies, as columns (see kernels.sql): direction, bytes, and whether the host side is
-- pinned or pageable (a pageable copy is staged through a driver buffer and blocks the host).
-- kind_code: 1 HtoD, 2 DtoH, 3 DtoD, 4 HtoH, 5 PtoP, 0 unknown (array and unified-memory copies
-- fold into the direction they move data). host_pinned_code: 1 pinned, 0 pageable, -1 when no
-- end is host memory or its kind is unknown.
-- requires: CUPTI_ACTIVITY_KIND_MEMCPY, ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND
WITH copies AS (
    SELECT
        m.start, m.end, m.bytes, m.streamId,
        coalesce(m.correlationId, -1) AS correlation,
        coalesce(m.globalPid, -1) AS global_pid,
        CASE
            WHEN op.name IN ('CUDA_MEMCPY_KIND_HTOD', 'CUDA_MEMCPY_KIND_HTOA', 'CUDA_MEMCPY_KIND_UVM_HTOD') THEN 1
            WHEN op.name IN ('CUDA_MEMCPY_KIND_DTOH', 'CUDA_MEMCPY_KIND_ATOH', 'CUDA_MEMCPY_KIND_UVM_DTOH') THEN 2
            WHEN op.name IN ('CUDA_MEMCPY_KIND_DTOD', 'CUDA_MEMCPY_KIND_ATOD', 'CUDA_MEMCPY_KIND_DTOA',
                             'CUDA_MEMCPY_KIND_ATOA', 'CUDA_MEMCPY_KIND_UVM_DTOD') THEN 3
            WHEN op.name = 'CUDA_MEMCPY_KIND_HTOH' THEN 4
            WHEN op.name = 'CUDA_MEMCPY_KIND_PTOP' THEN 5
            ELSE 0
        END AS kind_code,
        -- The host end: the source of an HtoD copy, the destination of a DtoH one.
        CASE
            WHEN op.name IN ('CUDA_MEMCPY_KIND_HTOD', 'CUDA_MEMCPY_KIND_HTOA', 'CUDA_MEMCPY_KIND_HTOH')
                THEN src.name
            WHEN op.name IN ('CUDA_MEMCPY_KIND_DTOH', 'CUDA_MEMCPY_KIND_ATOH') THEN dst.name
        END AS host_memory
    FROM CUPTI_ACTIVITY_KIND_MEMCPY AS m
    LEFT JOIN ENUM_CUDA_MEMCPY_OPER AS op ON op.id = m.copyKind
    LEFT JOIN ENUM_CUDA_MEM_KIND AS src ON src.id = m.srcKind
    LEFT JOIN ENUM_CUDA_MEM_KIND AS dst ON dst.id = m.dstKind
    WHERE m.start BETWEEN :t0 AND :t1
)
SELECT
    group_concat(start) AS start_ns,
    group_concat(end) AS end_ns,
    group_concat(bytes) AS bytes,
    group_concat(streamId) AS stream,
    group_concat(correlation) AS correlation,
    group_concat(global_pid) AS global_pid,
    group_concat(kind_code) AS kind_code,
    group_concat(CASE host_memory
                     WHEN 'CUDA_MEMOPR_MEMORY_KIND_PINNED' THEN 1
                     WHEN 'CUDA_MEMOPR_MEMORY_KIND_PAGEABLE' THEN 0
                     ELSE -1
                 END) AS host_pinned_code
FROM copies
