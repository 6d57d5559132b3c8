-- toolq schema version 8 -> 9 (applied by src/store/migrate.rs inside one transaction, which
-- then bumps PRAGMA schema_version so every connection, the migrating one included, reads the
-- new table definitions). Issue 19: fewer b-tree writes and checks per enqueue and finish.
--   * runs_session_created_idx stays: the dashboard's session pages walk it (dropping it
--     saved one b-tree write per enqueue, but a session's page then scanned every run).
--   * The json_valid() CHECKs on runs.args and inbox.data are gone: toolq writes both from
--     serde_json values (args validated against the tool's schema at enqueue), and parsing
--     every enqueue's args again cost ~5% of an enqueue. Removing a CHECK leaves the stored
--     rows as they are, so the table definitions are edited in place as SQLite documents for
--     that case (https://sqlite.org/lang_altertable.html, "making other kinds of table
--     schema changes") instead of copying every row.
-- The statements below leave the same schema as schema.sql (a test compares the results).

PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, ' CHECK (json_valid(args))', '')
    WHERE type = 'table' AND name = 'runs';
UPDATE sqlite_master SET sql = replace(sql, ' CHECK (json_valid(data))', '')
    WHERE type = 'table' AND name = 'inbox';
PRAGMA writable_schema = OFF;
