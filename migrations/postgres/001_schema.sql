-- toolq schema for Postgres, version 1 (stored in the schema_version table; src/store/postgres/
-- migrate.rs applies the steps in migrations/postgres/ in order).
--
-- The same tables, columns, state strings and ops views as schema.sql (the SQLite schema,
-- version 8), so the queries of OPS.md count the same rows on both engines. The same
-- conventions too: timestamps are fixed-width UTC text 'YYYY-MM-DDTHH:MM:SS.mmmZ' (string
-- order is time order: `WHERE finished_at > '2026-11-01'` works), JSON columns are text
-- checked to parse (read them with `args::jsonb ->> 'message'`), flags are 0/1 integers.

-- Now as toolq writes it, for the ops views.
CREATE FUNCTION toolq_ts(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS
$$ SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

CREATE TABLE schedules (
    id                 TEXT PRIMARY KEY,
    session_id         TEXT NOT NULL,
    tool               TEXT NOT NULL,
    args               TEXT NOT NULL CHECK (args::jsonb IS NOT NULL),
    title              TEXT NOT NULL,
    cron_expression    TEXT,
    scheduled_at       TEXT,
    timezone           TEXT NOT NULL DEFAULT 'UTC',
    enabled            BIGINT NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    next_trigger_at    TEXT,
    last_triggered_at  TEXT,
    trigger_count      BIGINT NOT NULL DEFAULT 0,
    missed_policy      TEXT NOT NULL DEFAULT 'once' CHECK (missed_policy IN ('skip', 'once', 'all')),
    catchup_window_ms  BIGINT CHECK (catchup_window_ms IS NULL OR catchup_window_ms >= 0),
    overlap_policy     TEXT NOT NULL DEFAULT 'skip' CHECK (overlap_policy IN ('skip', 'allow')),
    priority           BIGINT NOT NULL DEFAULT 0,
    max_attempts       BIGINT NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    timeout_ms         BIGINT CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    signal_on_completion BIGINT NOT NULL DEFAULT 1 CHECK (signal_on_completion IN (0, 1)),
    delivery           TEXT NOT NULL DEFAULT 'when_idle' CHECK (delivery IN ('interrupt', 'when_idle', 'silent')),
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    cancelled_at       TEXT,
    CHECK ((cron_expression IS NULL) <> (scheduled_at IS NULL))
);
CREATE INDEX schedules_due_idx ON schedules (next_trigger_at) WHERE enabled = 1 AND next_trigger_at IS NOT NULL;
CREATE INDEX schedules_session_idx ON schedules (session_id, enabled);

CREATE TABLE runs (
    id                    TEXT PRIMARY KEY COLLATE "C",
    session_id            TEXT NOT NULL COLLATE "C",
    tool                  TEXT NOT NULL COLLATE "C",
    args                  TEXT NOT NULL CHECK (args::jsonb IS NOT NULL),
    title                 TEXT NOT NULL,
    state                 TEXT NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'awaiting_approval',
                              'running', 'completed', 'failed', 'cancelled')),
    priority              BIGINT NOT NULL DEFAULT 0,
    attempt               BIGINT NOT NULL DEFAULT 0,
    max_attempts          BIGINT NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    run_at                TEXT NOT NULL COLLATE "C",
    created_at            TEXT NOT NULL COLLATE "C",
    started_at            TEXT,
    finished_at           TEXT COLLATE "C",
    lease_owner           TEXT,
    lease_token           TEXT,
    lease_expires_at      TEXT COLLATE "C",
    heartbeat_at          TEXT,
    idempotency_key       TEXT,
    timeout_ms            BIGINT CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    signal_on_completion  BIGINT NOT NULL DEFAULT 1 CHECK (signal_on_completion IN (0, 1)),
    delivery              TEXT NOT NULL DEFAULT 'when_idle' CHECK (delivery IN ('interrupt', 'when_idle', 'silent')),
    schedule_id           TEXT REFERENCES schedules(id) ON DELETE SET NULL,
    fire_at               TEXT,
    ticks                 BIGINT NOT NULL DEFAULT 1,
    status_text           TEXT,
    progress              TEXT CHECK (progress IS NULL OR progress::jsonb IS NOT NULL),
    output_tail           TEXT,
    error                 TEXT,
    internal_error        TEXT,
    errors                TEXT NOT NULL DEFAULT '[]' CHECK (errors::jsonb IS NOT NULL),
    operation_id          TEXT,
    stages                TEXT NOT NULL DEFAULT '[]' CHECK (stages::jsonb IS NOT NULL),
    approval_state        TEXT CHECK (approval_state IS NULL OR approval_state IN ('pending', 'approved', 'denied', 'expired')),
    approval_deadline     TEXT,
    approval_by           TEXT,
    approval_at           TEXT,
    approval_note         TEXT,
    cancel_requested_at   TEXT,
    unique_key            TEXT
);
CREATE UNIQUE INDEX runs_idempotency_idx ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_unique_idx ON runs (unique_key, state, created_at) WHERE unique_key IS NOT NULL;
CREATE UNIQUE INDEX runs_schedule_tick_idx ON runs (schedule_id, fire_at) WHERE schedule_id IS NOT NULL;
-- Claim: the head of each (session, tool), priority then age.
CREATE INDEX runs_claimable_idx ON runs (session_id, tool, priority DESC, run_at, id) WHERE state = 'queued';
CREATE INDEX runs_delayed_idx ON runs (tool, run_at) WHERE state = 'queued' AND run_at > created_at;
CREATE INDEX runs_running_owner_idx ON runs (lease_owner, lease_expires_at, session_id, tool) WHERE state = 'running';
CREATE INDEX runs_final_idx ON runs (state, finished_at)
    WHERE state = 'completed' OR state = 'failed' OR state = 'cancelled';
CREATE INDEX runs_session_created_idx ON runs (session_id, created_at);
CREATE INDEX runs_schedule_active_idx ON runs (schedule_id)
    WHERE (state = 'queued' OR state = 'awaiting_approval' OR state = 'running') AND schedule_id IS NOT NULL;
CREATE INDEX runs_schedule_catchup_idx ON runs (run_at) WHERE state = 'queued' AND schedule_id IS NOT NULL;
CREATE INDEX runs_awaiting_deadline_idx ON runs (approval_deadline) WHERE state = 'awaiting_approval';
CREATE INDEX runs_created_idx ON runs (created_at, id);

-- Run artifacts: '/.background/{run_id}/output.log' and '/.background/{run_id}/result.json'.
-- Read one with:  SELECT convert_from(content, 'UTF8') FROM blobs WHERE path = '/.background/bg_.../output.log';
CREATE TABLE blobs (
    session_id  TEXT NOT NULL COLLATE "C",
    path        TEXT NOT NULL COLLATE "C",
    run_id      TEXT,
    content     BYTEA NOT NULL,
    size        BIGINT NOT NULL,
    truncated   BIGINT NOT NULL DEFAULT 0 CHECK (truncated IN (0, 1)),
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, path)
);
-- Deleting a run deletes its blobs (toolq prune deletes them first, to count them).
CREATE FUNCTION toolq_runs_delete_blobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM blobs WHERE session_id = OLD.session_id
        AND path >= '/.background/' || OLD.id || '/' AND path < '/.background/' || OLD.id || '0';
    RETURN OLD;
END $$;
CREATE TRIGGER runs_delete_blobs AFTER DELETE ON runs FOR EACH ROW EXECUTE FUNCTION toolq_runs_delete_blobs();

CREATE TABLE schedule_occurrences (
    id            BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    schedule_id   TEXT NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    fire_at       TEXT NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN ('fired', 'skipped_overlap', 'missed', 'coalesced', 'paused')),
    run_id        TEXT REFERENCES runs(id) ON DELETE SET NULL,
    detail        TEXT,
    recorded_at   TEXT NOT NULL,
    UNIQUE (schedule_id, fire_at)
);
CREATE INDEX schedule_occurrences_recorded_idx ON schedule_occurrences (recorded_at);
CREATE INDEX schedule_occurrences_run_idx ON schedule_occurrences (run_id);

CREATE TABLE pauses (
    scope   TEXT NOT NULL CHECK (scope IN ('all', 'tool', 'session')),
    value   TEXT NOT NULL DEFAULT '',
    since   TEXT NOT NULL,
    by      TEXT,
    reason  TEXT,
    PRIMARY KEY (scope, value)
);

CREATE TABLE tool_starts (
    tool         TEXT NOT NULL,
    slice_start  TEXT NOT NULL COLLATE "C",
    slice_end    TEXT NOT NULL COLLATE "C",
    starts       BIGINT NOT NULL,
    PRIMARY KEY (tool, slice_start)
);

-- Messages for sessions. Ids increase in commit order: writers of messages take an
-- advisory lock until they commit (see src/store/postgres/finish.rs), so a reader that
-- goes forward from the last id it saw never skips one.
CREATE TABLE inbox (
    id          BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    session_id  TEXT NOT NULL,
    run_id      TEXT REFERENCES runs(id) ON DELETE CASCADE,
    attempt     BIGINT NOT NULL DEFAULT 0,
    kind        TEXT NOT NULL CHECK (kind IN ('completed', 'failed', 'cancelled', 'approval_request')),
    body        TEXT NOT NULL,
    data        TEXT NOT NULL DEFAULT '{}' CHECK (data::jsonb IS NOT NULL),
    delivery    TEXT NOT NULL DEFAULT 'when_idle' CHECK (delivery IN ('interrupt', 'when_idle', 'silent')),
    created_at  TEXT NOT NULL,
    read_at     TEXT,
    acked_at    TEXT COLLATE "C"
);
CREATE INDEX inbox_session_idx ON inbox (session_id, id);
-- At most one final message (completed, failed, cancelled) per run attempt.
CREATE UNIQUE INDEX inbox_run_idx ON inbox (run_id, attempt,
    (CASE WHEN kind = 'approval_request' THEN NULL ELSE 'final' END));
CREATE INDEX inbox_acked_idx ON inbox (acked_at) WHERE acked_at IS NOT NULL;

CREATE TABLE workers (
    id                  TEXT PRIMARY KEY,
    host                TEXT NOT NULL,
    boot_id             TEXT NOT NULL,
    pid_namespace       TEXT NOT NULL DEFAULT 'unknown',
    pid                 BIGINT NOT NULL,
    process_start_time  TEXT NOT NULL,
    started_at          TEXT NOT NULL,
    heartbeat_at        TEXT NOT NULL,
    last_poll_at        TEXT,
    stopped_at          TEXT,
    stop_reason         TEXT CHECK (stop_reason IS NULL OR stop_reason IN ('exited', 'died')),
    concurrency         BIGINT NOT NULL,
    poll_interval_ms    BIGINT NOT NULL DEFAULT 500,
    heartbeat_interval_ms BIGINT NOT NULL DEFAULT 2000,
    lease_ms            BIGINT NOT NULL DEFAULT 30000,
    busy_retries        BIGINT NOT NULL DEFAULT 0,
    version             TEXT NOT NULL,
    tools               TEXT NOT NULL DEFAULT '[]' CHECK (tools::jsonb IS NOT NULL)
);
CREATE INDEX workers_live_idx ON workers (heartbeat_at) WHERE stopped_at IS NULL;

-- Ops views: the same names and columns as schema.sql.
CREATE VIEW stuck_runs AS
SELECT id, session_id, tool, state, attempt, max_attempts, run_at, started_at, lease_owner,
       lease_expires_at, heartbeat_at, status_text, 'lease expired' AS reason
FROM runs
WHERE state = 'running' AND lease_expires_at < toolq_ts(now())
UNION ALL
SELECT id, session_id, tool, state, attempt, max_attempts, run_at, started_at, lease_owner,
       lease_expires_at, heartbeat_at, status_text, 'queued past due' AS reason
FROM runs
WHERE state = 'queued' AND run_at < toolq_ts(now() - interval '5 minutes')
  AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.scope = 'all'
                  OR (p.scope = 'tool' AND p.value = runs.tool)
                  OR (p.scope = 'session' AND p.value = runs.session_id));

CREATE VIEW failures_24h AS
SELECT id, session_id, tool, title, attempt, max_attempts, finished_at, error, internal_error
FROM runs
WHERE state = 'failed' AND finished_at >= toolq_ts(now() - interval '1 day')
ORDER BY finished_at DESC;

CREATE VIEW queue_depth AS
SELECT session_id, tool,
       count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'awaiting_approval') AS awaiting_approval,
       count(*) FILTER (WHERE state = 'running') AS running,
       min(run_at) FILTER (WHERE state = 'queued') AS oldest_queued_run_at
FROM runs WHERE state IN ('queued', 'awaiting_approval', 'running')
GROUP BY session_id, tool;

CREATE VIEW next_fires AS
SELECT id, session_id, tool, title, cron_expression, scheduled_at, timezone, next_trigger_at,
       last_triggered_at, trigger_count
FROM schedules
WHERE enabled = 1 AND next_trigger_at IS NOT NULL
ORDER BY next_trigger_at;

CREATE VIEW run_stages AS
SELECT r.id AS run_id, r.session_id, r.tool, r.operation_id,
       (s.value ->> 'attempt')::bigint AS attempt,
       s.seq,
       s.value ->> 'stage' AS stage,
       s.value ->> 'message' AS message,
       s.value -> 'progress' AS progress,
       s.value ->> 'at' AS at
FROM runs r, jsonb_array_elements(r.stages::jsonb) WITH ORDINALITY AS s(value, seq);

CREATE VIEW recent_occurrences AS
SELECT o.schedule_id, s.title, o.fire_at, o.outcome, o.run_id, r.state AS run_state, o.detail
FROM schedule_occurrences o
JOIN schedules s ON s.id = o.schedule_id
LEFT JOIN runs r ON r.id = o.run_id
WHERE o.fire_at >= toolq_ts(now() - interval '7 days')
ORDER BY o.schedule_id, o.fire_at DESC;

CREATE VIEW paused AS
SELECT scope, value, since, by, reason FROM pauses ORDER BY since;

CREATE VIEW tool_start_rates AS
SELECT tool,
       sum(CASE WHEN slice_end > toolq_ts(now() - interval '1 minute') THEN starts ELSE 0 END) AS last_minute,
       sum(CASE WHEN slice_end > toolq_ts(now() - interval '1 hour') THEN starts ELSE 0 END) AS last_hour,
       max(slice_end) AS last_slice_end
FROM tool_starts GROUP BY tool;
