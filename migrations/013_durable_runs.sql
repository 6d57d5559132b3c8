-- toolq schema version 12 -> 13 (applied by src/store/migrate.rs inside one transaction).
-- Issue 35: durable runs. A suspended run (ctx.sleep, ctx.wait_for_event, a snooze, an async
-- tool's CheckAgainIn) stays 'queued' with what it waits for in wait_kind (and the event's
-- name in wait_event); its run_at is when it wakes at the latest. runs.snoozes counts its
-- snoozes. step_records holds each run's recorded steps and waits (read them through the
-- run_steps view); run_events the events sent to runs (`toolq signal`). Nothing is rebuilt.
-- The statements below are the same text as in schema.sql (a test compares the results).

ALTER TABLE runs ADD COLUMN wait_kind TEXT CHECK (wait_kind IS NULL OR wait_kind = 'sleep' OR wait_kind = 'event' OR wait_kind = 'snooze' OR wait_kind = 'check' OR wait_kind = 'resume');
ALTER TABLE runs ADD COLUMN wait_event TEXT;
ALTER TABLE runs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;
CREATE TABLE step_records (
    run_id       TEXT NOT NULL,      -- the run (deleted with it: runs_delete_steps)
    seq          INTEGER NOT NULL,   -- its place in the run's sequence, 1-based
    name         TEXT NOT NULL,      -- unique within the run
    kind         TEXT NOT NULL CHECK (kind IN ('step', 'sleep', 'event')),
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
