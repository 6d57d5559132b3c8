-- toolq schema version 3 -> 4 (applied by src/store/migrate.rs inside one transaction).
-- A finish writes three fewer index entries; what the dropped indexes served is still served:
--   * runs_state_created_idx (state, created_at) and runs_finished_idx (finished_at) become one
--     index, runs_final_idx (state, finished_at) over final states: state counts,
--     failures_24h and retention (one state at a time, oldest finish first) read it.
--   * inbox_run_idx (run_id) and inbox_one_final_per_attempt (run_id, attempt, partial unique)
--     become one unique index whose third column is NULL for approval requests: the run
--     lookup and the one-final-message-per-attempt guard in one b-tree.
--   * inbox_unacked_idx is gone: no query could use it (a session's reader goes forward by id
--     through inbox_session_idx).
-- Two indexes are built from existing rows (a scan of runs and of inbox): stop the workers
-- before upgrading a large file.
-- The statements below are the same text as in schema.sql (a test compares the results).

DROP INDEX runs_state_created_idx;
DROP INDEX runs_finished_idx;
CREATE INDEX runs_final_idx ON runs (state, finished_at)
    WHERE state = 'completed' OR state = 'failed' OR state = 'cancelled';

DROP INDEX inbox_unacked_idx;
DROP INDEX inbox_run_idx;
DROP INDEX inbox_one_final_per_attempt;
CREATE UNIQUE INDEX inbox_run_idx ON inbox (run_id, attempt,
    (CASE WHEN kind = 'approval_request' THEN NULL ELSE 'final' END));
