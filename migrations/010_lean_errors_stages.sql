-- toolq schema version 9 -> 10 (applied by src/store/migrate.rs inside one transaction, which
-- then bumps PRAGMA schema_version so every connection, the migrating one included, reads the
-- new table definitions). Issue 19: fewer checks per enqueue and finish.
--   * The json_valid() CHECKs on runs.errors and runs.stages are gone. Both default to '[]'
--     and SQLite evaluated the CHECK on every insert (on the default) and on every finish
--     (which rewrites errors). toolq only ever appends to them with
--     json_insert(col, '$[#]', json(?)), which fails on invalid JSON itself, so they still
--     hold valid JSON. As in version 9, removing a CHECK leaves the stored rows as they are,
--     so the table definition is edited in place as SQLite documents for that case
--     (https://sqlite.org/lang_altertable.html, "making other kinds of table schema changes")
--     instead of copying every row.
-- The statements below leave the same schema as schema.sql (a test compares the results).

PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(replace(sql,
        ' CHECK (json_valid(errors))', ''),
        ' CHECK (json_valid(stages))', '')
    WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = OFF;
