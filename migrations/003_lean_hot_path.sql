-- toolq schema version 2 -> 3 (applied by src/store/migrate.rs inside one transaction).
-- The per-run write path touches fewer b-trees:
--   * blobs is clustered on (session_id, path) (WITHOUT ROWID) and has no foreign key and no
--     run_id index: a blob is one b-tree insert instead of three plus a parent lookup. A run's
--     blobs are found by their path prefix '/.background/{run_id}/'; a trigger deletes them
--     with their run, as the cascade did.
--   * runs_running_session_idx is gone: runs_running_owner_idx also holds session_id, and
--     per-session counts read it (running runs are few).
-- The table is rebuilt (a copy of every blob): stop the workers before upgrading a large file.
-- The statements below are the same text as in schema.sql (a test compares the results).

ALTER TABLE blobs RENAME TO blobs_v2;
CREATE TABLE blobs (
    session_id  TEXT NOT NULL,
    path        TEXT NOT NULL,
    run_id      TEXT,                          -- the run it belongs to (also in the path)
    content     BLOB NOT NULL,                 -- raw bytes; a log may hold non-UTF-8 bytes and NULs
    size        INTEGER NOT NULL,              -- bytes in content
    truncated   INTEGER NOT NULL DEFAULT 0 CHECK (truncated IN (0, 1)),  -- the log hit its cap
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, path)
) WITHOUT ROWID;
-- Deleting a run deletes its blobs (toolq prune deletes them first, to count them).
CREATE TRIGGER runs_delete_blobs AFTER DELETE ON runs BEGIN
    DELETE FROM blobs WHERE session_id = old.session_id
        AND path >= '/.background/' || old.id || '/' AND path < '/.background/' || old.id || '0';
END;
INSERT INTO blobs (session_id, path, run_id, content, size, truncated, created_at, updated_at)
    SELECT session_id, path, run_id, content, size, truncated, created_at, updated_at FROM blobs_v2;
DROP TABLE blobs_v2;

DROP INDEX runs_running_session_idx;
DROP INDEX runs_running_owner_idx;
CREATE INDEX runs_running_owner_idx ON runs (lease_owner, lease_expires_at, session_id) WHERE state = 'running';
