-- toolq Postgres schema version 4 -> 5. Issue 39: tags and trace context, as SQLite's
-- version 15 (migrations/015_tags_traces.sql says what each part is for). run_tags rows go
-- with their run through the foreign key.

ALTER TABLE runs ADD COLUMN tags TEXT CHECK (tags IS NULL OR tags::jsonb IS NOT NULL);
ALTER TABLE runs ADD COLUMN traceparent TEXT;
ALTER TABLE schedules ADD COLUMN tags TEXT CHECK (tags IS NULL OR tags::jsonb IS NOT NULL);
CREATE TABLE run_tags (
    run_id  TEXT NOT NULL COLLATE "C" REFERENCES runs(id) ON DELETE CASCADE,
    tag     TEXT NOT NULL COLLATE "C",
    PRIMARY KEY (run_id, tag)
);
CREATE INDEX run_tags_tag_idx ON run_tags (tag, run_id);
