-- The exporter's name/value records: schema version, product version, export parameters.
-- requires: META_DATA_EXPORT
SELECT name, value FROM META_DATA_EXPORT
