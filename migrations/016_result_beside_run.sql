-- toolq schema version 15 -> 16 (applied by src/store/migrate.rs inside one transaction).
-- Issue 38: a run's result lives beside the run. runs.result holds the bytes that were the
-- blob '/.background/{run_id}/result.json', written by the end's own UPDATE of the run row,
-- so an end writes one row fewer and no entry in a b-tree clustered by session. The table of
-- blob rows is renamed blob_rows (logs, raw output); `blobs` is now a view of the same name
-- and columns over both, so queries that read `blobs` keep working. Results move out of the
-- blob rows; nothing else is copied (the rename rewrites no rows).
-- The statements below are the same text as in schema.sql (a test compares the results).

ALTER TABLE runs ADD COLUMN result BLOB;
DROP TRIGGER runs_delete_blobs;
ALTER TABLE blobs RENAME TO blob_rows;
UPDATE runs SET result = (SELECT b.content FROM blob_rows b WHERE b.session_id = runs.session_id
        AND b.path = '/.background/' || runs.id || '/result.json')
    WHERE EXISTS (SELECT 1 FROM blob_rows b WHERE b.session_id = runs.session_id
        AND b.path = '/.background/' || runs.id || '/result.json');
DELETE FROM blob_rows WHERE path LIKE '/.background/%/result.json'
    AND EXISTS (SELECT 1 FROM runs r WHERE r.session_id = blob_rows.session_id
        AND blob_rows.path = '/.background/' || r.id || '/result.json');
-- Deleting a run deletes its blobs (toolq prune deletes them first, to count them).
CREATE TRIGGER runs_delete_blobs AFTER DELETE ON runs BEGIN
    DELETE FROM blob_rows WHERE session_id = old.session_id
        AND path >= '/.background/' || old.id || '/' AND path < '/.background/' || old.id || '0';
END;
-- Every blob, as the table had them: the blob rows, and each run's result as the row
-- '/.background/{run_id}/result.json' (its time is the run's end, else its start).
CREATE VIEW blobs AS
SELECT session_id, path, run_id, content, size, truncated, created_at, updated_at FROM blob_rows
UNION ALL
SELECT session_id, '/.background/' || id || '/result.json' AS path, id AS run_id,
       result AS content, length(result) AS size, 0 AS truncated,
       coalesce(finished_at, started_at, created_at) AS created_at,
       coalesce(finished_at, started_at, created_at) AS updated_at
FROM runs WHERE result IS NOT NULL;
-- Writes through the view go where each row lives (scripts that delete, redact or add blobs
-- by hand keep working): a run's result.json is its runs.result, anything else a blob row.
CREATE TRIGGER blobs_insert INSTEAD OF INSERT ON blobs BEGIN
    UPDATE runs SET result = new.content WHERE id = new.run_id AND session_id = new.session_id
        AND new.path = '/.background/' || new.run_id || '/result.json';
    INSERT INTO blob_rows (session_id, path, run_id, content, size, truncated, created_at, updated_at)
        SELECT new.session_id, new.path, new.run_id, new.content, new.size,
               coalesce(new.truncated, 0), new.created_at, new.updated_at
        WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = new.run_id AND session_id = new.session_id
            AND new.path = '/.background/' || new.run_id || '/result.json');
END;
CREATE TRIGGER blobs_update INSTEAD OF UPDATE ON blobs BEGIN
    UPDATE runs SET result = new.content WHERE id = old.run_id AND result IS NOT NULL
        AND old.path = '/.background/' || old.run_id || '/result.json';
    UPDATE blob_rows SET content = new.content, size = new.size, truncated = new.truncated,
        updated_at = new.updated_at
        WHERE session_id = old.session_id AND path = old.path;
END;
CREATE TRIGGER blobs_delete INSTEAD OF DELETE ON blobs BEGIN
    UPDATE runs SET result = NULL WHERE id = old.run_id AND result IS NOT NULL
        AND old.path = '/.background/' || old.run_id || '/result.json';
    DELETE FROM blob_rows WHERE session_id = old.session_id AND path = old.path;
END;
