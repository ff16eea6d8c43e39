-- Device copies: direction, bytes, and whether the host side is pinned or pageable (a pageable
-- copy is staged through a driver buffer and blocks the host thread).
-- requires: CUPTI_ACTIVITY_KIND_MEMCPY, ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND
SELECT
    m.start AS start_ns,
    m.end AS end_ns,
    m.bytes AS bytes,
    m.streamId AS stream,
    coalesce(m.correlationId, -1) AS correlation,
    coalesce(m.globalPid, -1) AS global_pid,
    CASE op.name
        WHEN 'CUDA_MEMCPY_KIND_HTOD' THEN 'HtoD'
        WHEN 'CUDA_MEMCPY_KIND_HTOA' THEN 'HtoD'
        WHEN 'CUDA_MEMCPY_KIND_UVM_HTOD' THEN 'HtoD'
        WHEN 'CUDA_MEMCPY_KIND_DTOH' THEN 'DtoH'
        WHEN 'CUDA_MEMCPY_KIND_ATOH' THEN 'DtoH'
        WHEN 'CUDA_MEMCPY_KIND_UVM_DTOH' THEN 'DtoH'
        WHEN 'CUDA_MEMCPY_KIND_DTOD' THEN 'DtoD'
        WHEN 'CUDA_MEMCPY_KIND_ATOD' THEN 'DtoD'
        WHEN 'CUDA_MEMCPY_KIND_DTOA' THEN 'DtoD'
        WHEN 'CUDA_MEMCPY_KIND_ATOA' THEN 'DtoD'
        WHEN 'CUDA_MEMCPY_KIND_UVM_DTOD' THEN 'DtoD'
        WHEN 'CUDA_MEMCPY_KIND_HTOH' THEN 'HtoH'
        WHEN 'CUDA_MEMCPY_KIND_PTOP' THEN 'PtoP'
        ELSE 'Unknown'
    END AS kind,
    -- The host end of the copy: source for HtoD, destination for DtoH; NULL when both ends are
    -- on the device.
    CASE
        WHEN op.name IN ('CUDA_MEMCPY_KIND_HTOD', 'CUDA_MEMCPY_KIND_HTOA') THEN src.name
        WHEN op.name IN ('CUDA_MEMCPY_KIND_DTOH', 'CUDA_MEMCPY_KIND_ATOH') THEN dst.name
        WHEN op.name = 'CUDA_MEMCPY_KIND_HTOH' THEN src.name
    END AS host_memory
FROM CUPTI_ACTIVITY_KIND_MEMCPY AS m
LEFT JOIN ENUM_CUDA_MEMCPY_OPER AS op ON op.id = m.copyKind
LEFT JOIN ENUM_CUDA_MEM_KIND AS src ON src.id = m.srcKind
LEFT JOIN ENUM_CUDA_MEM_KIND AS dst ON dst.id = m.dstKind
