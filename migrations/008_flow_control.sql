-- toolq schema version 7 -> 8 (applied by src/store/migrate.rs inside one transaction).
-- Flow control (issue 21):
--   * pauses: what operators paused (a tool, a session, or everything); claims skip it.
--   * tool_starts: starts of each rate-limited tool per slice of its window (`rate`).
--   * runs_running_owner_idx gains `tool`: per-tool running counts (max_running) read the
--     same small index as the per-session counts.
--   * schedule_occurrences.outcome may be 'paused' (a tick of a paused tool or session); the
--     CHECK changes, so the table is rebuilt (rows kept, ids kept).
-- Every statement is cheap: running runs are few, and the ledger is copied once.
-- The statements below are the same text as in schema.sql (a test compares the results).

CREATE TABLE pauses (
    scope   TEXT NOT NULL CHECK (scope IN ('all', 'tool', 'session')),
    value   TEXT NOT NULL DEFAULT '',          -- the tool or session; '' for scope 'all'
    since   TEXT NOT NULL,
    by      TEXT,                              -- who paused (--by)
    reason  TEXT,                              -- why (--reason)
    PRIMARY KEY (scope, value)
) WITHOUT ROWID;

CREATE TABLE tool_starts (
    tool         TEXT NOT NULL,
    slice_start  TEXT NOT NULL,                -- a slice of the rate's window: window / 60 wide
    slice_end    TEXT NOT NULL,
    starts       INTEGER NOT NULL,             -- starts claimed within [slice_start, slice_end)
    PRIMARY KEY (tool, slice_start)
) WITHOUT ROWID;

DROP INDEX runs_running_owner_idx;
CREATE INDEX runs_running_owner_idx ON runs (lease_owner, lease_expires_at, session_id, tool) WHERE state = 'running';

-- The view that reads the ledger is dropped first: a rename would point it at the old table.
DROP VIEW recent_occurrences;
ALTER TABLE schedule_occurrences RENAME TO schedule_occurrences_v5;
DROP INDEX schedule_occurrences_recorded_idx;
DROP INDEX schedule_occurrences_run_idx;
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
INSERT INTO schedule_occurrences (id, schedule_id, fire_at, outcome, run_id, detail, recorded_at)
    SELECT id, schedule_id, fire_at, outcome, run_id, detail, recorded_at FROM schedule_occurrences_v5;
DROP TABLE schedule_occurrences_v5;
CREATE INDEX schedule_occurrences_recorded_idx ON schedule_occurrences (recorded_at);
CREATE INDEX schedule_occurrences_run_idx ON schedule_occurrences (run_id);
-- What happened to each schedule's ticks over the last 7 days.
CREATE VIEW recent_occurrences AS
SELECT o.schedule_id, s.title, o.fire_at, o.outcome, o.run_id, r.state AS run_state, o.detail
FROM schedule_occurrences o
JOIN schedules s ON s.id = o.schedule_id
LEFT JOIN runs r ON r.id = o.run_id
WHERE o.fire_at >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-7 days')
ORDER BY o.schedule_id, o.fire_at DESC;

-- Paused runs are not stuck.
DROP VIEW stuck_runs;
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
