-- toolq schema version 1 -> 2 (applied by src/store/migrate.rs inside one transaction).
-- runs_state_created_idx keeps only finished runs: enqueue and claim no longer write an entry
-- into it, and finish writes one instead of deleting and inserting twice. The two views that
-- read unfinished runs now select one state at a time, so each arm uses its partial index.
-- runs_schedule_active_idx and inbox_one_final_per_attempt spell their conditions as OR
-- chains: an IN list of three values made SQLite build a temporary b-tree on every insert,
-- claim and finish.
-- The statements below are the same text as in schema.sql (a test compares the results).

DROP INDEX runs_state_created_idx;
CREATE INDEX runs_state_created_idx ON runs (state, created_at)
    WHERE state = 'completed' OR state = 'failed' OR state = 'cancelled';

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
WHERE state = 'queued' AND run_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-5 minutes');

DROP VIEW queue_depth;
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

DROP INDEX runs_schedule_active_idx;
CREATE INDEX runs_schedule_active_idx ON runs (schedule_id)
    WHERE (state = 'queued' OR state = 'awaiting_approval' OR state = 'running') AND schedule_id IS NOT NULL;

DROP INDEX inbox_one_final_per_attempt;
CREATE UNIQUE INDEX inbox_one_final_per_attempt ON inbox (run_id, attempt)
    WHERE kind = 'completed' OR kind = 'failed' OR kind = 'cancelled';
