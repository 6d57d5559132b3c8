-- toolq schema, version 15 (stored in PRAGMA user_version; src/store/migrate.rs upgrades older files).
--
-- This file is the whole schema. It is embedded in the binary and applied by `toolq init`
-- (or by any command that opens a new database). Ops people: this is your interface.
--
-- Conventions
--   * Timestamps are fixed-width UTC text, 'YYYY-MM-DDTHH:MM:SS.mmmZ'. String order is time
--     order, so `WHERE finished_at > '2026-11-01'` works, and people can read them.
--   * JSON columns (args, progress, data, ...) hold valid JSON and can be read with
--     json_extract(), e.g. `json_extract(progress, '$.current')`. runs.args and inbox.data,
--     written on every enqueue and finish, are not re-checked with json_valid() (version 9),
--     nor are runs.errors and runs.stages, which toolq only appends to with json_insert()
--     (version 10), nor runs.progress, which toolq writes from a typed value (version 11).
--   * The foreign keys that an enqueue or a finish checks on insert (runs.schedule_id,
--     inbox.run_id) are DEFERRABLE INITIALLY DEFERRED: checked at COMMIT, so a multi-row
--     INSERT needs no statement journal (version 11). A violation still fails the whole
--     transaction. Their ON DELETE actions run at once, as before.
--   * States are CHECK-constrained; the lifecycle is
--       (awaiting_approval ->) queued -> running -> completed | failed | cancelled
--     (a run that needs approval is inserted awaiting_approval; a worker may still park a
--     queued one there), and a running run whose attempt fails with a retryable error goes
--     back to queued.
--   * Index names say which query they serve.
--   * CHECKs and partial-index conditions on the hot tables (runs, inbox) spell out
--     `x = 'a' OR x = 'b' ...` instead of `x IN ('a', 'b', 'c')`: SQLite builds a temporary
--     b-tree for an IN list of three or more values on every statement execution, which cost
--     ~15% of an enqueue. A query that should use such a partial index repeats its condition.

-- One row per run: one execution of a tool (with retries) owned by a session.
CREATE TABLE runs (
    id                    TEXT PRIMARY KEY,                  -- 'bg_' + uuid v7 (time ordered)
    session_id            TEXT NOT NULL,                     -- the owner; its inbox gets the completion message
    tool                  TEXT NOT NULL,                     -- registered tool name
    args                  TEXT NOT NULL,  -- validated against the tool's schema at enqueue
    title                 TEXT NOT NULL,
    state                 TEXT NOT NULL DEFAULT 'queued' CHECK (state = 'queued' OR state = 'awaiting_approval'
                              OR state = 'running' OR state = 'completed' OR state = 'failed' OR state = 'cancelled'),
    priority              INTEGER NOT NULL DEFAULT 0,        -- higher runs first; ties run oldest first
    attempt               INTEGER NOT NULL DEFAULT 0,        -- attempts started so far (claim adds 1)
    max_attempts          INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    run_at                TEXT NOT NULL,                     -- not before this instant (also the retry time)
    created_at            TEXT NOT NULL,
    started_at            TEXT,                              -- start of the latest attempt
    finished_at           TEXT,                              -- set when the run reaches a final state
    -- Lease of the current attempt. Every write after the claim must match (id, attempt, lease_token);
    -- a stale attempt whose run was rescued can never overwrite newer state.
    lease_owner           TEXT,                              -- workers.id of the claiming process
    lease_token           TEXT,                              -- fresh random token per claim (fencing)
    lease_expires_at      TEXT,                              -- rescued after this unless heartbeated
    heartbeat_at          TEXT,
    idempotency_key       TEXT,                              -- enqueueing the same key returns this run (unique, see runs_idempotency_idx)
    timeout_ms            INTEGER CHECK (timeout_ms IS NULL OR timeout_ms > 0),  -- per-run override
    signal_on_completion  INTEGER NOT NULL DEFAULT 1 CHECK (signal_on_completion IN (0, 1)),
    delivery              TEXT NOT NULL DEFAULT 'when_idle'
                              CHECK (delivery = 'interrupt' OR delivery = 'when_idle' OR delivery = 'silent'),
    schedule_id           TEXT REFERENCES schedules(id) ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED,  -- the schedule that made it
    fire_at               TEXT,                              -- the schedule tick it stands for
    ticks                 INTEGER NOT NULL DEFAULT 1,        -- schedule ticks this run stands for (catch-up)
    status_text           TEXT,                              -- latest status line reported by the tool
    progress              TEXT,  -- {current,total,unit,label}
    output_tail           TEXT,                              -- last 2048 characters of the log, escaped
    error                 TEXT,                              -- message the session may see
    internal_error        TEXT,                              -- ops only, never shown to the session
    errors                TEXT NOT NULL DEFAULT '[]',  -- one entry per failed attempt
    operation_id          TEXT,                              -- async tools: the external operation to resume
    stages                TEXT NOT NULL DEFAULT '[]',  -- async tools: stage history
    approval_state        TEXT CHECK (approval_state IS NULL OR approval_state = 'pending'
                              OR approval_state = 'approved' OR approval_state = 'denied' OR approval_state = 'expired'),
    approval_deadline     TEXT,
    approval_by           TEXT,
    approval_at           TEXT,
    approval_note         TEXT,
    cancel_requested_at   TEXT                               -- a running run is asked to stop
, unique_key TEXT, background INTEGER NOT NULL DEFAULT 0 CHECK (background IN (0, 1)), wait_kind TEXT CHECK (wait_kind IS NULL OR wait_kind = 'sleep' OR wait_kind = 'event' OR wait_kind = 'snooze' OR wait_kind = 'check' OR wait_kind = 'resume' OR wait_kind = 'children' OR wait_kind = 'parents'), wait_event TEXT, snoozes INTEGER NOT NULL DEFAULT 0, batch_id TEXT, parent_run_id TEXT, deps_pending INTEGER NOT NULL DEFAULT 0, tags TEXT, traceparent TEXT, result BLOB);
-- unique_key (version 7): hex SHA-256 of tool and canonical args; NULL unless enqueued unique.
-- background (version 12): 1 for a run started in the background (spawn_background, a
-- Background-mode tool through the executor); spawn_background's limits count these only.
-- Uniqueness only where a value exists: partial indexes keep ad-hoc runs (no key, no schedule)
-- out of them, so an enqueue commits fewer index pages.
-- wait_kind, wait_event, snoozes (version 13): see "Durable runs" at the end.
-- batch_id, parent_run_id, deps_pending (version 14): see "Composition" at the end.
-- tags, traceparent (version 15): see "Tags and traces" at the end.
-- result (version 16): the result.json of a run that has one (the bytes the blob held), written
-- by its end; the view `blobs` shows it as that blob. See "A run's result beside the run" at the end.
-- Background runs only (version 12): spawn_background's per-session count seeks it.
CREATE INDEX runs_background_idx ON runs (session_id, state, run_at) WHERE background = 1;
CREATE UNIQUE INDEX runs_idempotency_idx ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Unique runs (version 7): an enqueue with --unique-by args finds a run of the same tool and
-- canonical args in a given state, created since a given instant: one seek per state. Only
-- runs enqueued unique have a key, so other enqueues write no entry.
CREATE INDEX runs_unique_idx ON runs (unique_key, state, created_at) WHERE unique_key IS NOT NULL;
-- A schedule tick makes at most one run.
CREATE UNIQUE INDEX runs_schedule_tick_idx ON runs (schedule_id, fire_at) WHERE schedule_id IS NOT NULL;

-- Claim: runnable rows by session and tool, in priority then age order (the claim visits
-- each session's head for each tool the worker has, so it never walks runs of tools it lacks;
-- version 5 added tool).
CREATE INDEX runs_claimable_idx ON runs (session_id, tool, priority DESC, run_at, id) WHERE state = 'queued';
-- The next due time of a worker's sleep: delayed runs (enqueued with --in/--at, retries
-- waiting for their backoff, runs handed back) by tool, earliest first. A run due at once
-- has run_at = created_at and is not in it, so most enqueues and claims write no entry here
-- (version 5). A query that should use it repeats `run_at > created_at`.
CREATE INDEX runs_delayed_idx ON runs (tool, run_at) WHERE state = 'queued' AND run_at > created_at;
-- Limits, heartbeats and rescue: running runs by owner. Running runs are few (at most the
-- workers' slots), so per-session counts read this index whole instead of keeping a second one
-- that every claim and finish would write (version 3). Per-tool counts (max_running) read it
-- too (version 8 added tool).
CREATE INDEX runs_running_owner_idx ON runs (lease_owner, lease_expires_at, session_id, tool) WHERE state = 'running';
-- Counts, failures_24h and retention: finished runs by state and finish time. Only final
-- states: queued, awaiting and running runs have their own partial indexes above and below,
-- so enqueue and claim write no entry here and finish writes one (version 4: one index where
-- versions 2-3 kept one by state and creation and one by finish time; every finish wrote both).
-- Retention walks it one state at a time, oldest finish first.
CREATE INDEX runs_final_idx ON runs (state, finished_at)
    WHERE state = 'completed' OR state = 'failed' OR state = 'cancelled';
-- A session's runs, newest first (the dashboard's session and filtered run pages).
CREATE INDEX runs_session_created_idx ON runs (session_id, created_at);
-- Active runs of a schedule (overlap policy).
CREATE INDEX runs_schedule_active_idx ON runs (schedule_id)
    WHERE (state = 'queued' OR state = 'awaiting_approval' OR state = 'running') AND schedule_id IS NOT NULL;
-- Schedule firing: the latest queued schedule run, so catch-up starts are spread and capped.
CREATE INDEX runs_schedule_catchup_idx ON runs (run_at) WHERE state = 'queued' AND schedule_id IS NOT NULL;
CREATE INDEX runs_awaiting_deadline_idx ON runs (approval_deadline) WHERE state = 'awaiting_approval';

-- Run artifacts as blob rows: '/.background/{run_id}/output.log' (and raw_output.txt when a
-- tool returns one). A run's result.json is runs.result (version 16); the view `blobs` below
-- shows both as the one table of blobs that earlier versions had.
-- Read one with:  SELECT CAST(content AS TEXT) FROM blobs WHERE path = '/.background/bg_.../output.log';
-- A finished run whose log is empty has no output.log row (issue 38: an empty log costs its
-- finish no write); toolq's readers (`toolq logs`, the API, the dashboard) show it as empty.
-- A run's blob rows all live under '/.background/{run_id}/', so the primary key finds them:
--   WHERE session_id = :s AND path >= '/.background/' || :id || '/' AND path < '/.background/' || :id || '0'
-- Clustered on its key (WITHOUT ROWID) and with no index or foreign key of its own, a blob
-- costs one b-tree insert (version 3); the trigger below deletes a run's blobs with the run.
-- The name is quoted as SQLite keeps it after migration 016 renamed the table `blobs`.
CREATE TABLE "blob_rows" (
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

-- Recurring (cron) and one-shot schedules. Each due tick inserts one run.
CREATE TABLE schedules (
    id                 TEXT PRIMARY KEY,       -- 'sch_' + uuid v7
    session_id         TEXT NOT NULL,
    tool               TEXT NOT NULL,
    args               TEXT NOT NULL CHECK (json_valid(args)),
    title              TEXT NOT NULL,
    cron_expression    TEXT,                   -- 5-field cron or @macro, evaluated in timezone
    scheduled_at       TEXT,                   -- one-shot instant
    timezone           TEXT NOT NULL DEFAULT 'UTC',  -- IANA name
    enabled            INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    next_trigger_at    TEXT,                   -- NULL when disabled or exhausted
    last_triggered_at  TEXT,
    trigger_count      INTEGER NOT NULL DEFAULT 0,
    missed_policy      TEXT NOT NULL DEFAULT 'once' CHECK (missed_policy IN ('skip', 'once', 'all')),
    catchup_window_ms  INTEGER CHECK (catchup_window_ms IS NULL OR catchup_window_ms >= 0),  -- NULL = one period
    overlap_policy     TEXT NOT NULL DEFAULT 'skip' CHECK (overlap_policy IN ('skip', 'allow')),
    priority           INTEGER NOT NULL DEFAULT 0,
    max_attempts       INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    timeout_ms         INTEGER CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    signal_on_completion INTEGER NOT NULL DEFAULT 1 CHECK (signal_on_completion IN (0, 1)),
    delivery           TEXT NOT NULL DEFAULT 'when_idle' CHECK (delivery IN ('interrupt', 'when_idle', 'silent')),
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    cancelled_at       TEXT, tags TEXT,
    CHECK ((cron_expression IS NULL) <> (scheduled_at IS NULL))  -- exactly one of the two
);
-- Due-schedule lookup.
CREATE INDEX schedules_due_idx ON schedules (next_trigger_at) WHERE enabled = 1 AND next_trigger_at IS NOT NULL;
CREATE INDEX schedules_session_idx ON schedules (session_id, enabled);

-- One row per expected schedule tick: what happened to it.
--   fired            a run was inserted for this tick (run_id); a catch-up run's detail says how
--                    many ticks it stands for (also runs.ticks)
--   coalesced        missed during downtime and folded into the catch-up run run_id
--   missed           no run: missed-ticks policy 'skip', or outside the catch-up window
--   skipped_overlap  no run: the schedule's previous run was still active (overlap policy 'skip')
--   paused           no run: the schedule's tool or session (or everything) was paused; a tick
--                    the missed-ticks policy would have run (version 8)
-- e.g.  SELECT fire_at, outcome, run_id, detail FROM schedule_occurrences
--       WHERE schedule_id = 'sch_...' ORDER BY fire_at DESC LIMIT 20;
CREATE TABLE schedule_occurrences (
    id            INTEGER PRIMARY KEY,
    schedule_id   TEXT NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    fire_at       TEXT NOT NULL,               -- the tick's nominal instant
    outcome       TEXT NOT NULL CHECK (outcome IN ('fired', 'skipped_overlap', 'missed', 'coalesced', 'paused')),
    run_id        TEXT REFERENCES runs(id) ON DELETE SET NULL,  -- fired: its run; coalesced: the catch-up run
    detail        TEXT,
    recorded_at   TEXT NOT NULL,
    UNIQUE (schedule_id, fire_at)
);
CREATE INDEX schedule_occurrences_recorded_idx ON schedule_occurrences (recorded_at);
-- Retention: deleting a run nulls its occurrences' run_id, and prune keeps runs a recent tick points at.
CREATE INDEX schedule_occurrences_run_idx ON schedule_occurrences (run_id);

-- Flow control (version 8). What operators paused: claims skip queued runs of a paused tool
-- or session (or every run, scope 'all'); running runs finish. Read by every claim (the table
-- is tiny), so every worker and every restart honours it.
CREATE TABLE pauses (
    scope   TEXT NOT NULL CHECK (scope IN ('all', 'tool', 'session')),
    value   TEXT NOT NULL DEFAULT '',          -- the tool or session; '' for scope 'all'
    since   TEXT NOT NULL,
    by      TEXT,                              -- who paused (--by)
    reason  TEXT,                              -- why (--reason)
    PRIMARY KEY (scope, value)
) WITHOUT ROWID;

-- Starts of each tool that has a `rate` limit, counted per slice of its window (window / 60):
-- a claim adds its starts to the current slice's row, and the window's count is the sum of the
-- slices that overlap it (a range of the key). A slice counts whole while any of it is in the
-- window, so the limit holds in every window; the claim that counts also deletes slices older
-- than two windows. Tools without a rate write none.
CREATE TABLE tool_starts (
    tool         TEXT NOT NULL,
    slice_start  TEXT NOT NULL,                -- a slice of the rate's window: window / 60 wide
    slice_end    TEXT NOT NULL,
    starts       INTEGER NOT NULL,             -- starts claimed within [slice_start, slice_end)
    PRIMARY KEY (tool, slice_start)
) WITHOUT ROWID;

-- Messages for sessions: run completions, failures, cancellations, approval requests.
CREATE TABLE inbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,  -- increasing: read after the last id you saw
    session_id  TEXT NOT NULL,
    run_id      TEXT REFERENCES runs(id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    attempt     INTEGER NOT NULL DEFAULT 0,
    kind        TEXT NOT NULL CHECK (kind = 'completed' OR kind = 'failed' OR kind = 'cancelled'
                                     OR kind = 'approval_request' OR kind = 'batch_completed'),
    body        TEXT NOT NULL,                      -- the text shown to the session
    data        TEXT NOT NULL DEFAULT '{}',  -- the same, structured
    delivery    TEXT NOT NULL DEFAULT 'when_idle'
                CHECK (delivery = 'interrupt' OR delivery = 'when_idle' OR delivery = 'silent'),
    created_at  TEXT NOT NULL,
    read_at     TEXT,
    acked_at    TEXT
);
-- Reading a session's messages in order (also the unacknowledged ones: a session's reader
-- goes forward from the last id it saw).
CREATE INDEX inbox_session_idx ON inbox (session_id, id);
-- A run's messages (deleted with it), and recording is exactly-once: at most one final
-- message (completed, failed, cancelled) per run attempt. The third column is the same value
-- for every final message and NULL for approval requests (NULLs never collide), so this one
-- index is both the run lookup and the guard (version 4; before, two indexes that every
-- finish wrote).
CREATE UNIQUE INDEX inbox_run_idx ON inbox (run_id, attempt,
    (CASE WHEN kind = 'approval_request' THEN NULL ELSE 'final' END));
-- Retention: acknowledged messages by age.
CREATE INDEX inbox_acked_idx ON inbox (acked_at) WHERE acked_at IS NOT NULL;

-- One row per worker process, for ops and for rescuing the runs of dead processes.
-- `tools` (version 5, the last column) is the JSON array of the tool names the worker has
-- registered, sorted; it claims runs of those tools only. Runs no live worker can take:
--   SELECT tool, count(*) FROM runs WHERE state = 'queued' AND tool NOT IN
--     (SELECT t.value FROM workers w, json_each(w.tools) t WHERE w.stopped_at IS NULL) GROUP BY tool;
CREATE TABLE workers (
    id                  TEXT PRIMARY KEY,      -- 'wk_' + uuid v7
    host                TEXT NOT NULL,
    boot_id             TEXT NOT NULL,         -- /proc/sys/kernel/random/boot_id
    pid_namespace       TEXT NOT NULL DEFAULT 'unknown',  -- /proc/self/ns/pid: containers may share host and boot
    pid                 INTEGER NOT NULL,
    process_start_time  TEXT NOT NULL,         -- from /proc/PID/stat; tells a reused pid apart
    started_at          TEXT NOT NULL,
    heartbeat_at        TEXT NOT NULL,
    last_poll_at        TEXT,
    stopped_at          TEXT,                  -- set on a clean exit, or when another worker found it dead
    stop_reason         TEXT CHECK (stop_reason IS NULL OR stop_reason IN ('exited', 'died')),
    concurrency         INTEGER NOT NULL,
    poll_interval_ms    INTEGER NOT NULL DEFAULT 500,   -- its loop polls this often (status: stale after 3)
    heartbeat_interval_ms INTEGER NOT NULL DEFAULT 2000, -- it heartbeats this often
    lease_ms            INTEGER NOT NULL DEFAULT 30000, -- its runs' lease length
    busy_retries        INTEGER NOT NULL DEFAULT 0,  -- SQLITE_BUSY retries this process needed
    version             TEXT NOT NULL
, tools TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tools)));  -- spelled as migration 005 adds it
CREATE INDEX workers_live_idx ON workers (heartbeat_at) WHERE stopped_at IS NULL;

-- Ops views. Views read the wall clock (strftime('now')); the worker itself never does in SQL.
-- Unfinished runs are selected one state at a time, so each arm reads its partial index.

-- Running runs whose lease has expired, or queued runs overdue by more than 5 minutes (not
-- counting paused ones: see the `paused` view; version 8).
CREATE VIEW stuck_runs AS
SELECT id, session_id, tool, state, attempt, max_attempts, run_at, started_at, lease_owner,
       lease_expires_at, heartbeat_at, status_text, 'lease expired' AS reason
FROM runs
WHERE state = 'running' AND lease_expires_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
UNION ALL
SELECT id, session_id, tool, state, attempt, max_attempts, run_at, started_at, lease_owner,
       lease_expires_at, heartbeat_at, status_text, 'queued past due' AS reason
FROM runs
WHERE state = 'queued' AND run_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-5 minutes')
  AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.scope = 'all'
                  OR (p.scope = 'tool' AND p.value = runs.tool)
                  OR (p.scope = 'session' AND p.value = runs.session_id));

-- Failed runs of the last 24 hours, newest first, with the error the session saw and the ops detail.
CREATE VIEW failures_24h AS
SELECT id, session_id, tool, title, attempt, max_attempts, finished_at, error, internal_error
FROM runs
WHERE state = 'failed' AND finished_at >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day')
ORDER BY finished_at DESC;

-- Unfinished work by session and tool.
CREATE VIEW queue_depth AS
SELECT session_id, tool,
       sum(state = 'queued') AS queued,
       sum(state = 'awaiting_approval') AS awaiting_approval,
       sum(state = 'running') AS running,
       min(CASE WHEN state = 'queued' THEN run_at END) AS oldest_queued_run_at
FROM (SELECT session_id, tool, state, run_at FROM runs WHERE state = 'queued'
      UNION ALL
      SELECT session_id, tool, state, run_at FROM runs WHERE state = 'awaiting_approval'
      UNION ALL
      SELECT session_id, tool, state, run_at FROM runs WHERE state = 'running')
GROUP BY session_id, tool;

-- Enabled schedules in the order they fire next.
CREATE VIEW next_fires AS
SELECT id, session_id, tool, title, cron_expression, scheduled_at, timezone, next_trigger_at,
       last_triggered_at, trigger_count
FROM schedules
WHERE enabled = 1 AND next_trigger_at IS NOT NULL
ORDER BY next_trigger_at;

-- Async tools (version 6): one row per stage an attempt reported, in order, with its time;
-- read from runs.stages ([{stage, message, progress, at, attempt}, ...]), where the worker
-- stores them. runs.operation_id is kept for every later attempt of the run, which resumes the
-- operation instead of starting it again. Filter by run_id (a primary-key lookup).
CREATE VIEW run_stages AS
SELECT r.id AS run_id, r.session_id, r.tool, r.operation_id,
       json_extract(s.value, '$.attempt') AS attempt,
       s.key + 1 AS seq,
       json_extract(s.value, '$.stage') AS stage,
       json_extract(s.value, '$.message') AS message,
       json_extract(s.value, '$.progress') AS progress,
       json_extract(s.value, '$.at') AS at
FROM runs r, json_each(r.stages) s;

-- What happened to each schedule's ticks over the last 7 days.
CREATE VIEW recent_occurrences AS
SELECT o.schedule_id, s.title, o.fire_at, o.outcome, o.run_id, r.state AS run_state, o.detail
FROM schedule_occurrences o
JOIN schedules s ON s.id = o.schedule_id
LEFT JOIN runs r ON r.id = o.run_id
WHERE o.fire_at >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-7 days')
ORDER BY o.schedule_id, o.fire_at DESC;

-- What is paused, since when, by whom.
CREATE VIEW paused AS
SELECT scope, value, since, by, reason FROM pauses ORDER BY since;

-- Starts of each rate-limited tool in the slices ending within the last minute and hour (what
-- its `rate` counts; rows older than two of its windows are deleted, see OPS.md).
CREATE VIEW tool_start_rates AS
SELECT tool,
       sum(CASE WHEN slice_end > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 minute') THEN starts ELSE 0 END) AS last_minute,
       sum(CASE WHEN slice_end > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour') THEN starts ELSE 0 END) AS last_hour,
       max(slice_end) AS last_slice_end
FROM tool_starts GROUP BY tool;

-- Durable runs (version 13). A suspended run (ctx.sleep, ctx.wait_for_event, a snooze, an
-- async tool's CheckAgainIn) stays 'queued' with what it waits for in wait_kind (and the
-- event's name in wait_event); its run_at is when it wakes at the latest. step_records holds
-- each run's recorded steps and waits (read them through run_steps); run_events the events
-- sent to runs (`toolq signal`). waiting_runs lists the suspended runs.
CREATE TABLE step_records (
    run_id       TEXT NOT NULL,      -- the run (deleted with it: runs_delete_steps)
    seq          INTEGER NOT NULL,   -- its place in the run's sequence, 1-based
    name         TEXT NOT NULL,      -- unique within the run
    kind         TEXT NOT NULL CHECK (kind IN ('step', 'sleep', 'event', 'children')),
    status       TEXT NOT NULL CHECK (status IN ('done', 'failed', 'waiting')),
    output       TEXT,               -- the recorded JSON result
    error        TEXT,               -- a failed step's error
    wake_at      TEXT,               -- a wait: when it ends at the latest
    attempt      INTEGER NOT NULL,   -- the attempt that recorded it
    recorded_at  TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
-- Like blobs, a step costs one b-tree insert: no foreign key to check at each commit (the
-- worker records a run's steps under its lease); deleting a run deletes its steps.
CREATE TRIGGER runs_delete_steps AFTER DELETE ON runs BEGIN
    DELETE FROM step_records WHERE run_id = old.id;
END;
CREATE TABLE run_events (
    run_id       TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,      -- the first delivery of a name wins
    payload      TEXT NOT NULL DEFAULT 'null',
    sent_at      TEXT NOT NULL,
    sent_by      TEXT,
    consumed_at  TEXT,               -- when a wait of the run took it
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE VIEW run_steps AS
SELECT s.run_id, r.session_id, r.tool, s.seq, s.name, s.kind, s.status, s.output, s.error,
       s.wake_at, s.attempt, s.recorded_at
FROM step_records s JOIN runs r ON r.id = s.run_id;
CREATE VIEW waiting_runs AS
SELECT id, session_id, tool, wait_kind, wait_event, run_at AS wakes_at, attempt, snoozes, status_text
FROM runs WHERE state = 'queued' AND wait_kind IS NOT NULL;

-- Composition (version 14): batches, dependencies (run_deps, runs.deps_pending) and child
-- runs (runs.parent_run_id); runs.batch_id names a run's batch. See migrations/014_composition.sql.
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

-- Tags and traces (version 15): runs.tags and schedules.tags (a JSON object of text values,
-- written once; a schedule's are copied to each run it fires), run_tags (one 'key=value' row
-- per tag, the index of `runs --tag`) and runs.traceparent (the W3C trace context of the span
-- that enqueued the run). See migrations/015_tags_traces.sql.
CREATE TABLE run_tags (
    run_id  TEXT NOT NULL,                      -- the tagged run (deleted with it)
    tag     TEXT NOT NULL,                      -- 'key=value'
    PRIMARY KEY (run_id, tag)
) WITHOUT ROWID;
-- `runs --tag customer=acme`: the runs with a tag, newest id last.
CREATE INDEX run_tags_tag_idx ON run_tags (tag, run_id);
CREATE TRIGGER runs_delete_tags AFTER DELETE ON runs WHEN old.tags IS NOT NULL BEGIN
    DELETE FROM run_tags WHERE run_id = old.id;
END;

-- A run's result beside the run (version 16): runs.result (see migrations/016_result_beside_run.sql).
-- Deleting a run deletes its blobs (toolq prune deletes them first, to count them).
CREATE TRIGGER runs_delete_blobs AFTER DELETE ON runs BEGIN
    DELETE FROM blob_rows WHERE session_id = old.session_id
        AND path >= '/.background/' || old.id || '/' AND path < '/.background/' || old.id || '0';
END;
-- Every blob, as the table had them: the blob rows, and each run's result as the row
-- '/.background/{run_id}/result.json' (its time is the run's end, else its start).
CREATE VIEW blobs AS
SELECT session_id, path, run_id, content, size, truncated, created_at, updated_at FROM blob_rows
UNION ALL
SELECT session_id, '/.background/' || id || '/result.json' AS path, id AS run_id,
       result AS content, length(result) AS size, 0 AS truncated,
       coalesce(finished_at, started_at, created_at) AS created_at,
       coalesce(finished_at, started_at, created_at) AS updated_at
FROM runs WHERE result IS NOT NULL;
-- Writes through the view go where each row lives (scripts that delete, redact or add blobs
-- by hand keep working): a run's result.json is its runs.result, anything else a blob row.
CREATE TRIGGER blobs_insert INSTEAD OF INSERT ON blobs BEGIN
    UPDATE runs SET result = new.content WHERE id = new.run_id AND session_id = new.session_id
        AND new.path = '/.background/' || new.run_id || '/result.json';
    INSERT INTO blob_rows (session_id, path, run_id, content, size, truncated, created_at, updated_at)
        SELECT new.session_id, new.path, new.run_id, new.content, new.size,
               coalesce(new.truncated, 0), new.created_at, new.updated_at
        WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = new.run_id AND session_id = new.session_id
            AND new.path = '/.background/' || new.run_id || '/result.json');
END;
CREATE TRIGGER blobs_update INSTEAD OF UPDATE ON blobs BEGIN
    UPDATE runs SET result = new.content WHERE id = old.run_id AND result IS NOT NULL
        AND old.path = '/.background/' || old.run_id || '/result.json';
    UPDATE blob_rows SET content = new.content, size = new.size, truncated = new.truncated,
        updated_at = new.updated_at
        WHERE session_id = old.session_id AND path = old.path;
END;
CREATE TRIGGER blobs_delete INSTEAD OF DELETE ON blobs BEGIN
    UPDATE runs SET result = NULL WHERE id = old.run_id AND result IS NOT NULL
        AND old.path = '/.background/' || old.run_id || '/result.json';
    DELETE FROM blob_rows WHERE session_id = old.session_id AND path = old.path;
END;
