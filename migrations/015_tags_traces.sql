-- toolq schema version 14 -> 15 (applied by src/store/migrate.rs inside one transaction).
-- Issue 39: tags and trace context.
-- runs.tags and schedules.tags hold a run's (a schedule's, copied to each run it fires) tags as
-- a JSON object of text values, '{"customer":"acme"}', written once at insert; NULL: none.
-- run_tags indexes them, one row 'key=value' per tag, for `runs --tag` and the bulk filters;
-- an untagged run writes no row and no index entry. runs.traceparent is the W3C trace context
-- (https://www.w3.org/TR/trace-context/) of the span that enqueued the run, so the worker's
-- spans continue the caller's trace; NULL when tracing was off and the caller gave none.
-- Existing runs and schedules have no tags. Nothing is rebuilt.
-- The statements below are the same text as in schema.sql (a test compares the results).

ALTER TABLE runs ADD COLUMN tags TEXT;
ALTER TABLE runs ADD COLUMN traceparent TEXT;
ALTER TABLE schedules ADD COLUMN tags TEXT;
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
