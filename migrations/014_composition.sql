-- toolq schema version 13 -> 14 (applied by src/store/migrate.rs inside one transaction, which
-- then bumps PRAGMA schema_version). Issue 36: composition (batches, dependencies, child runs).
--   * runs.batch_id: the batch a run belongs to (`toolq enqueue --file F --batch`); set at
--     insert, never changed. runs.parent_run_id: the run that spawned it (ctx.spawn_child, or
--     spawn_background called from inside a run). runs.deps_pending: how many of its parents
--     (run_deps) it still waits for; while it is above 0 the run is 'queued' with wait_kind
--     'parents' and run_at '9999-12-31T23:59:59.999Z', so the claim never walks it.
--   * wait_kind gains 'children' (ctx.wait_children: due once its last child is final) and
--     'parents' (blocked by --after). inbox.kind gains 'batch_completed' (one message per
--     batch completion, run_id NULL). step_records.kind gains 'children'. These CHECKs only
--     widen, so the table definitions are edited in place as SQLite documents for such
--     changes (https://sqlite.org/lang_altertable.html), as versions 9 to 11 did.
--   * batches: one row per batch, with its counters (kept by the end-writer in the same
--     transaction as each member's end). run_deps: one row per dependency edge.
--   * Views: run_edges (dependencies, spawned children and batch callbacks, one row per
--     edge), batch_progress (batches with their counters and state), blocked_runs.
-- The statements below leave the same schema as schema.sql (a test compares the results).


ALTER TABLE runs ADD COLUMN batch_id TEXT;
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE runs ADD COLUMN deps_pending INTEGER NOT NULL DEFAULT 0;
-- A batch's runs (written once, at insert: a member's state changes write no entry here).
CREATE INDEX runs_batch_idx ON runs (batch_id, id) WHERE batch_id IS NOT NULL;
-- A run's spawned children, by state: ctx.wait_children is due once none is unfinished.
CREATE INDEX runs_parent_idx ON runs (parent_run_id, state) WHERE parent_run_id IS NOT NULL;
CREATE TABLE batches (
    id              TEXT PRIMARY KEY,               -- 'bt_' + uuid v7
    session_id      TEXT NOT NULL,                  -- gets the batch_completed message
    title           TEXT NOT NULL,
    total           INTEGER NOT NULL DEFAULT 0,     -- runs added
    pending         INTEGER NOT NULL DEFAULT 0,     -- runs not yet final
    completed       INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0,
    cancelled       INTEGER NOT NULL DEFAULT 0,
    on_complete     TEXT,                           -- the callback run to enqueue: {tool, args, title, max_attempts, priority}
    callback_run_id TEXT,                           -- the callback run of the latest completion
    completions     INTEGER NOT NULL DEFAULT 0,     -- times it completed (a retry reopens it)
    created_at      TEXT NOT NULL,
    completed_at    TEXT                            -- NULL while a run of it is unfinished
);
CREATE INDEX batches_session_idx ON batches (session_id, id);
CREATE TABLE run_deps (
    child_id    TEXT NOT NULL,                      -- the dependent run (deleted with it)
    parent_id   TEXT NOT NULL,                      -- the run (or batch, mode 'batch') it waits for
    mode        TEXT NOT NULL CHECK (mode IN ('all', 'any', 'batch')),  -- all: the parent must complete; any: any final state
    resolved    TEXT,                               -- the parent's final state once it reached one
    PRIMARY KEY (child_id, parent_id)
) WITHOUT ROWID;
-- A parent's unresolved dependents: the end-writer resolves them in the parent's end.
CREATE INDEX run_deps_parent_idx ON run_deps (parent_id) WHERE resolved IS NULL;
CREATE TRIGGER runs_delete_deps AFTER DELETE ON runs BEGIN
    DELETE FROM run_deps WHERE child_id = old.id;
END;
CREATE VIEW run_edges AS
SELECT parent_id, child_id,
       CASE mode WHEN 'all' THEN 'after' WHEN 'any' THEN 'after_any' ELSE 'callback' END AS kind,
       resolved
FROM run_deps
UNION ALL
SELECT parent_run_id AS parent_id, id AS child_id, 'spawned' AS kind,
       CASE WHEN state = 'completed' OR state = 'failed' OR state = 'cancelled' THEN state END AS resolved
FROM runs WHERE parent_run_id IS NOT NULL;
CREATE VIEW batch_progress AS
SELECT id, session_id, title, total, pending, completed, failed, cancelled,
       CASE WHEN completed_at IS NULL THEN 'running' ELSE 'completed' END AS state,
       completions, callback_run_id, created_at, completed_at
FROM batches;
CREATE VIEW blocked_runs AS
SELECT r.id, r.session_id, r.tool, r.deps_pending,
       (SELECT group_concat(d.parent_id, ',') FROM run_deps d
        WHERE d.child_id = r.id AND d.resolved IS NULL) AS waiting_for
FROM runs r WHERE r.state = 'queued' AND r.wait_kind = 'parents';

-- Last: an ALTER TABLE after an in-place edit in the same step would edit the text at
-- offsets parsed from the old definition (src/store/sqlite/migrate.rs).
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql,
        'OR wait_kind = ''resume'')',
        'OR wait_kind = ''resume'' OR wait_kind = ''children'' OR wait_kind = ''parents'')')
    WHERE type = 'table' AND name = 'runs';
UPDATE sqlite_master SET sql = replace(sql,
        'OR kind = ''approval_request'')',
        'OR kind = ''approval_request'' OR kind = ''batch_completed'')')
    WHERE type = 'table' AND name = 'inbox';
UPDATE sqlite_master SET sql = replace(sql,
        'CHECK (kind IN (''step'', ''sleep'', ''event''))',
        'CHECK (kind IN (''step'', ''sleep'', ''event'', ''children''))')
    WHERE type = 'table' AND name = 'step_records';
PRAGMA writable_schema = OFF;
