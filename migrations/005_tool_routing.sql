-- toolq schema version 4 -> 5 (applied by src/store/migrate.rs inside one transaction).
-- Workers claim only runs of the tools they have, and sleep until the next delayed run:
--   * runs_claimable_idx gains `tool` after `session_id`: a claim reads each session's head
--     for each tool the worker has, so runs of tools it lacks are never walked.
--   * runs_delayed_idx (tool, run_at) over queued runs not due at their creation: the
--     earliest run_at a worker can claim, one seek per tool.
--   * workers.tools: the JSON array of tool names each worker has registered.
-- Two indexes are built from existing rows (a scan of runs): stop the workers before
-- upgrading a large file.
-- The statements below are the same text as in schema.sql (a test compares the results).

DROP INDEX runs_claimable_idx;
CREATE INDEX runs_claimable_idx ON runs (session_id, tool, priority DESC, run_at, id) WHERE state = 'queued';
CREATE INDEX runs_delayed_idx ON runs (tool, run_at) WHERE state = 'queued' AND run_at > created_at;

ALTER TABLE workers ADD COLUMN tools TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tools));
