-- toolq Postgres schema version 3 -> 4. Issue 36: composition (batches, dependencies, child
-- runs), as SQLite's version 14 (migrations/014_composition.sql says what each part is for).

ALTER TABLE runs DROP CONSTRAINT runs_wait_kind_check;
ALTER TABLE runs ADD CONSTRAINT runs_wait_kind_check CHECK (wait_kind IS NULL
    OR wait_kind IN ('sleep', 'event', 'snooze', 'check', 'resume', 'children', 'parents'));
ALTER TABLE inbox DROP CONSTRAINT inbox_kind_check;
ALTER TABLE inbox ADD CONSTRAINT inbox_kind_check
    CHECK (kind IN ('completed', 'failed', 'cancelled', 'approval_request', 'batch_completed'));
ALTER TABLE step_records DROP CONSTRAINT step_records_kind_check;
ALTER TABLE step_records ADD CONSTRAINT step_records_kind_check
    CHECK (kind IN ('step', 'sleep', 'event', 'children'));
ALTER TABLE runs ADD COLUMN batch_id TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN parent_run_id TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN deps_pending BIGINT NOT NULL DEFAULT 0;
CREATE INDEX runs_batch_idx ON runs (batch_id, id) WHERE batch_id IS NOT NULL;
CREATE INDEX runs_parent_idx ON runs (parent_run_id, state) WHERE parent_run_id IS NOT NULL;
CREATE TABLE batches (
    id              TEXT PRIMARY KEY COLLATE "C",
    session_id      TEXT NOT NULL COLLATE "C",
    title           TEXT NOT NULL,
    total           BIGINT NOT NULL DEFAULT 0,
    pending         BIGINT NOT NULL DEFAULT 0,
    completed       BIGINT NOT NULL DEFAULT 0,
    failed          BIGINT NOT NULL DEFAULT 0,
    cancelled       BIGINT NOT NULL DEFAULT 0,
    on_complete     TEXT,
    callback_run_id TEXT COLLATE "C",
    completions     BIGINT NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL COLLATE "C",
    completed_at    TEXT COLLATE "C"
);
CREATE INDEX batches_session_idx ON batches (session_id, id);
CREATE TABLE run_deps (
    child_id    TEXT NOT NULL COLLATE "C" REFERENCES runs(id) ON DELETE CASCADE,
    parent_id   TEXT NOT NULL COLLATE "C",
    mode        TEXT NOT NULL CHECK (mode IN ('all', 'any', 'batch')),
    resolved    TEXT,
    PRIMARY KEY (child_id, parent_id)
);
CREATE INDEX run_deps_parent_idx ON run_deps (parent_id) WHERE resolved IS NULL;
CREATE VIEW run_edges AS
SELECT parent_id, child_id,
       CASE mode WHEN 'all' THEN 'after' WHEN 'any' THEN 'after_any' ELSE 'callback' END AS kind,
       resolved
FROM run_deps
UNION ALL
SELECT parent_run_id AS parent_id, id AS child_id, 'spawned' AS kind,
       CASE WHEN state IN ('completed', 'failed', 'cancelled') THEN state END AS resolved
FROM runs WHERE parent_run_id IS NOT NULL;
CREATE VIEW batch_progress AS
SELECT id, session_id, title, total, pending, completed, failed, cancelled,
       CASE WHEN completed_at IS NULL THEN 'running' ELSE 'completed' END AS state,
       completions, callback_run_id, created_at, completed_at
FROM batches;
CREATE VIEW blocked_runs AS
SELECT r.id, r.session_id, r.tool, r.deps_pending,
       (SELECT string_agg(d.parent_id, ',' ORDER BY d.parent_id) FROM run_deps d
        WHERE d.child_id = r.id AND d.resolved IS NULL) AS waiting_for
FROM runs r WHERE r.state = 'queued' AND r.wait_kind = 'parents';
