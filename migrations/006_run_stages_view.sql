-- toolq schema version 5 -> 6 (applied by src/store/migrate.rs inside one transaction).
-- Async tools: the ops view run_stages, one row per stage an attempt reported, read from
-- runs.stages (where the worker stores them); nothing is copied or rebuilt.
-- The statements below are the same text as in schema.sql (a test compares the results).

CREATE VIEW run_stages AS
SELECT r.id AS run_id, r.session_id, r.tool, r.operation_id,
       json_extract(s.value, '$.attempt') AS attempt,
       s.key + 1 AS seq,
       json_extract(s.value, '$.stage') AS stage,
       json_extract(s.value, '$.message') AS message,
       json_extract(s.value, '$.progress') AS progress,
       json_extract(s.value, '$.at') AS at
FROM runs r, json_each(r.stages) s;
