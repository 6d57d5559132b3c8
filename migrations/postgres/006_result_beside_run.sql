-- toolq Postgres schema version 5 -> 6. Issue 38: a run's result lives beside the run, as
-- SQLite's version 16 (migrations/016_result_beside_run.sql says why): runs.result holds
-- what was the blob '/.background/{run_id}/result.json'; the table of blob rows is renamed
-- blob_rows, and `blobs` is a view of the same name and columns over both.
-- runs pages are filled to 70 % only: a claim and an end each write a new version of the run
-- row, and with room left on the page the new version stays on it (no relation extension or
-- free-space search under four hosts' writes, and one heap page per run). A drain of 20,000
-- runs went from ~3,000 to ~4,000 runs/s with it, in one session and over 50 (BENCHMARKS.md,
-- session 21). It applies to pages written from now on; no rewrite.

ALTER TABLE runs ADD COLUMN result BYTEA;
ALTER TABLE runs SET (fillfactor = 70);
ALTER TABLE blobs RENAME TO blob_rows;
ALTER TABLE blob_rows RENAME CONSTRAINT blobs_pkey TO blob_rows_pkey;
UPDATE runs r SET result = b.content FROM blob_rows b
    WHERE b.session_id = r.session_id AND b.path = '/.background/' || r.id || '/result.json';
DELETE FROM blob_rows b USING runs r
    WHERE b.session_id = r.session_id AND b.path = '/.background/' || r.id || '/result.json';
-- Deleting a run deletes its blobs (toolq prune deletes them first, to count them).
CREATE OR REPLACE FUNCTION toolq_runs_delete_blobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM blob_rows WHERE session_id = OLD.session_id
        AND path >= '/.background/' || OLD.id || '/' AND path < '/.background/' || OLD.id || '0';
    RETURN OLD;
END $$;
-- Every blob, as the table had them: the blob rows, and each run's result as the row
-- '/.background/{run_id}/result.json' (its time is the run's end, else its start).
CREATE VIEW blobs AS
SELECT session_id, path, run_id, content, size, truncated, created_at, updated_at FROM blob_rows
UNION ALL
SELECT session_id, ('/.background/' || id || '/result.json') COLLATE "C" AS path, id AS run_id,
       result AS content, length(result)::bigint AS size, 0::bigint AS truncated,
       coalesce(finished_at, started_at, created_at) AS created_at,
       coalesce(finished_at, started_at, created_at) AS updated_at
FROM runs WHERE result IS NOT NULL;
-- Writes through the view go where each row lives (scripts that delete, redact or add blobs
-- by hand keep working): a run's result.json is its runs.result, anything else a blob row.
CREATE FUNCTION toolq_blobs_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE runs SET result = NEW.content WHERE id = NEW.run_id AND session_id = NEW.session_id
            AND NEW.path = '/.background/' || NEW.run_id || '/result.json';
        IF NOT FOUND THEN
            INSERT INTO blob_rows (session_id, path, run_id, content, size, truncated, created_at, updated_at)
                VALUES (NEW.session_id, NEW.path, NEW.run_id, NEW.content, NEW.size,
                        coalesce(NEW.truncated, 0), NEW.created_at, NEW.updated_at);
        END IF;
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE runs SET result = NEW.content WHERE id = OLD.run_id AND result IS NOT NULL
            AND OLD.path = '/.background/' || OLD.run_id || '/result.json';
        UPDATE blob_rows SET content = NEW.content, size = NEW.size, truncated = NEW.truncated,
            updated_at = NEW.updated_at
            WHERE session_id = OLD.session_id AND path = OLD.path;
        RETURN NEW;
    END IF;
    UPDATE runs SET result = NULL WHERE id = OLD.run_id AND result IS NOT NULL
        AND OLD.path = '/.background/' || OLD.run_id || '/result.json';
    DELETE FROM blob_rows WHERE session_id = OLD.session_id AND path = OLD.path;
    RETURN OLD;
END $$;
CREATE TRIGGER blobs_write INSTEAD OF INSERT OR UPDATE OR DELETE ON blobs
    FOR EACH ROW EXECUTE FUNCTION toolq_blobs_write();
