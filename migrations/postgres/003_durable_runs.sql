-- toolq Postgres schema version 2 -> 3. Issue 35: durable runs, as SQLite's version 13. A
-- suspended run (ctx.sleep, ctx.wait_for_event, a snooze, an async tool's CheckAgainIn) stays
-- 'queued' with what it waits for in wait_kind (and the event's name in wait_event); its
-- run_at is when it wakes at the latest. runs.snoozes counts its snoozes. step_records holds
-- each run's recorded steps and waits (read them through the run_steps view); run_events the
-- events sent to runs (`toolq signal`).

ALTER TABLE runs ADD COLUMN wait_kind TEXT CHECK (wait_kind IS NULL OR wait_kind IN ('sleep', 'event', 'snooze', 'check', 'resume'));
ALTER TABLE runs ADD COLUMN wait_event TEXT;
ALTER TABLE runs ADD COLUMN snoozes BIGINT NOT NULL DEFAULT 0;
CREATE TABLE step_records (
    run_id       TEXT NOT NULL COLLATE "C" REFERENCES runs(id) ON DELETE CASCADE,
    seq          BIGINT NOT NULL,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('step', 'sleep', 'event')),
    status       TEXT NOT NULL CHECK (status IN ('done', 'failed', 'waiting')),
    output       TEXT,
    error        TEXT,
    wake_at      TEXT COLLATE "C",
    attempt      BIGINT NOT NULL,
    recorded_at  TEXT NOT NULL COLLATE "C",
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE run_events (
    run_id       TEXT NOT NULL COLLATE "C" REFERENCES runs(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    payload      TEXT NOT NULL DEFAULT 'null',
    sent_at      TEXT NOT NULL COLLATE "C",
    sent_by      TEXT,
    consumed_at  TEXT COLLATE "C",
    PRIMARY KEY (run_id, name)
);
CREATE VIEW run_steps AS
SELECT s.run_id, r.session_id, r.tool, s.seq, s.name, s.kind, s.status, s.output, s.error,
       s.wake_at, s.attempt, s.recorded_at
FROM step_records s JOIN runs r ON r.id = s.run_id;
CREATE VIEW waiting_runs AS
SELECT id, session_id, tool, wait_kind, wait_event, run_at AS wakes_at, attempt, snoozes, status_text
FROM runs WHERE state = 'queued' AND wait_kind IS NOT NULL;
