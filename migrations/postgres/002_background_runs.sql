-- toolq Postgres schema version 1 -> 2. Issue 33: spawn_background's limits count background
-- runs only. runs.background is 1 for a run started in the background (spawn_background, or a
-- Background-mode tool called through the executor) and 0 for every other run, so existing
-- runs are not background runs. runs_background_idx holds background runs only (other
-- enqueues write no entry); the per-session count seeks it by session and state.

ALTER TABLE runs ADD COLUMN background BIGINT NOT NULL DEFAULT 0 CHECK (background IN (0, 1));
CREATE INDEX runs_background_idx ON runs (session_id, state, run_at) WHERE background = 1;
