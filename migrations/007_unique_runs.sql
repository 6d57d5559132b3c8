-- toolq schema version 6 -> 7 (applied by src/store/migrate.rs inside one transaction).
-- Unique runs: `enqueue --unique-by args` stores the hex SHA-256 of the tool and its canonical
-- args in runs.unique_key, and an enqueue with the same key returns a run of it that is in
-- the given states and period. runs_unique_idx serves that lookup (one seek per state) and
-- holds only runs enqueued unique, so other enqueues write no entry. Nothing is rebuilt:
-- existing runs have no key.
-- The statements below are the same text as in schema.sql (a test compares the results).

ALTER TABLE runs ADD COLUMN unique_key TEXT;
CREATE INDEX runs_unique_idx ON runs (unique_key, state, created_at) WHERE unique_key IS NOT NULL;
