-- toolq schema version 11 -> 12 (applied by src/store/migrate.rs inside one transaction).
-- Issue 33: spawn_background's limits count background runs only. runs.background is 1 for a
-- run started in the background (spawn_background, or a Background-mode tool called through
-- the executor) and 0 for every other run (CLI and library enqueues, batch files, the runs a
-- schedule fires), so existing runs are not background runs. runs_background_idx holds
-- background runs only, so other enqueues write no entry; the per-session count seeks it by
-- session and state. Nothing is rebuilt.
-- The statements below are the same text as in schema.sql (a test compares the results).

ALTER TABLE runs ADD COLUMN background INTEGER NOT NULL DEFAULT 0 CHECK (background IN (0, 1));
CREATE INDEX runs_background_idx ON runs (session_id, state, run_at) WHERE background = 1;
