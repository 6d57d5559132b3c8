-- toolq Postgres schema version 6 -> 7. Issue 38: a claim and an end each write a new version
-- of the run row, and on Postgres a new row version goes into every index of `runs` that it
-- matches (the state changes, so no update is heap-only). `runs_created_idx` and
-- `runs_session_created_idx` hold every run: two index entries written per claim and per end
-- for keys that never change. They move to `run_order`, a row per run written once at its
-- insert and deleted with the run, which the newest-first listings read instead. A drain of
-- 20,000 runs went from ~2,030 to ~2,350 runs/s without them (BENCHMARKS.md, session 26).
--
-- Triggers keep it whole whoever writes `runs` (toolq, or a script by hand): one statement
-- per insert or delete statement (transition tables), a row's own fix when a script changes
-- its creation time or session, and a TRUNCATE of its own.

CREATE TABLE run_order (
    created_at  TEXT NOT NULL COLLATE "C",
    id          TEXT NOT NULL COLLATE "C",
    session_id  TEXT NOT NULL COLLATE "C"
);
INSERT INTO run_order (created_at, id, session_id) SELECT created_at, id, session_id FROM runs;
CREATE INDEX run_order_created_idx ON run_order (created_at, id);
CREATE INDEX run_order_session_idx ON run_order (session_id, created_at, id);

CREATE FUNCTION toolq_run_order_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_order (created_at, id, session_id) SELECT created_at, id, session_id FROM added;
    RETURN NULL;
END $$;
CREATE TRIGGER runs_order_insert AFTER INSERT ON runs REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION toolq_run_order_insert();

CREATE FUNCTION toolq_run_order_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM run_order o USING gone g WHERE o.created_at = g.created_at AND o.id = g.id;
    RETURN NULL;
END $$;
CREATE TRIGGER runs_order_delete AFTER DELETE ON runs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION toolq_run_order_delete();

CREATE FUNCTION toolq_run_order_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE run_order SET created_at = NEW.created_at, id = NEW.id, session_id = NEW.session_id
        WHERE created_at = OLD.created_at AND id = OLD.id;
    RETURN NULL;
END $$;
-- Only for updates that name these columns (toolq's never do), and only rows they change.
CREATE TRIGGER runs_order_update AFTER UPDATE OF created_at, id, session_id ON runs
    FOR EACH ROW WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at OR OLD.id IS DISTINCT FROM NEW.id
        OR OLD.session_id IS DISTINCT FROM NEW.session_id)
    EXECUTE FUNCTION toolq_run_order_update();

CREATE FUNCTION toolq_run_order_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE run_order;
    RETURN NULL;
END $$;
CREATE TRIGGER runs_order_truncate AFTER TRUNCATE ON runs
    FOR EACH STATEMENT EXECUTE FUNCTION toolq_run_order_truncate();

DROP INDEX runs_created_idx;
DROP INDEX runs_session_created_idx;
