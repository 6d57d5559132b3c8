-- toolq schema version 10 -> 11 (applied by src/store/migrate.rs inside one transaction, which
-- then bumps PRAGMA schema_version so every connection, the migrating one included, reads the
-- new table definitions). Issue 19: a batch enqueue's multi-row INSERTs keep no statement
-- journal.
--   * SQLite keeps a statement journal (a copy of every page the statement changes, to undo
--     that one statement) for a statement that writes many rows and may stop halfway. An
--     immediate foreign key and a function call in a CHECK both may, whatever the statement's
--     conflict clause, so every 64-row INSERT of runs and every 16-row INSERT of inbox
--     messages kept one: a fifth of a batch enqueue's time (BENCHMARKS.md).
--   * runs.schedule_id and inbox.run_id become DEFERRABLE INITIALLY DEFERRED: checked at
--     COMMIT instead of after each statement. A violation still fails the whole transaction,
--     and the ON DELETE actions still run at once.
--   * The json_valid() CHECK on runs.progress is gone: toolq writes it from a typed value,
--     as it writes args, data, errors and stages, whose CHECKs went in versions 9 and 10.
-- Neither change touches a stored row, so the table definitions are edited in place as
-- SQLite documents for such changes (https://sqlite.org/lang_altertable.html, "making other
-- kinds of table schema changes") instead of copying every row.
-- The statements below leave the same schema as schema.sql (a test compares the results).

PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(replace(sql,
        'REFERENCES schedules(id) ON DELETE SET NULL,',
        'REFERENCES schedules(id) ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED,'),
        ' CHECK (progress IS NULL OR json_valid(progress))', '')
    WHERE type = 'table' AND name = 'runs';
UPDATE sqlite_master SET sql = replace(sql,
        'REFERENCES runs(id) ON DELETE CASCADE,',
        'REFERENCES runs(id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,')
    WHERE type = 'table' AND name = 'inbox';
PRAGMA writable_schema = OFF;
