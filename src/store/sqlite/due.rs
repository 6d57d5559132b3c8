//! What a worker can run, and when: the next delayed run of its tools (to sleep until it),
//! whether anything of its tools is left (drain), and the queued runs of tools no live worker
//! has (`stats`, `status`).

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension};

use super::Ctx;
use super::codec::{parse_ts, ts};
use crate::error::StoreError;

/// The earliest delayed run of one tool due after `?2`: one seek into `runs_delayed_idx`,
/// whose condition (`run_at > created_at`) the query repeats so the planner can use it.
pub(crate) const NEXT_DELAYED: &str = "SELECT min(run_at) FROM runs INDEXED BY runs_delayed_idx \
    WHERE state = 'queued' AND run_at > created_at AND tool = ?1 AND run_at > ?2";

/// The earliest `run_at` after `now` of a queued run of one of `tools`: when a worker with
/// these tools next has something to claim. A run due at its creation is never in the future
/// (its `run_at` is its creation time), so only delayed runs are looked at.
pub fn next_due(
    conn: &Connection,
    now: DateTime<Utc>,
    tools: &[String],
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let paused = super::flow::paused(conn)?;
    if paused.all {
        return Ok(None);
    }
    let now = ts(now);
    let mut stmt = conn
        .prepare_cached(NEXT_DELAYED)
        .ctx("prepare next delayed run")?;
    let mut earliest: Option<String> = None;
    for tool in tools.iter().filter(|t| !paused.tools.contains(t)) {
        let at: Option<String> = stmt
            .query_row([tool, &now], |r| r.get(0))
            .ctx("next delayed run")?;
        if let Some(at) = at
            && earliest.as_ref().is_none_or(|e| at < *e)
        {
            earliest = Some(at);
        }
    }
    Ok(earliest.as_deref().and_then(parse_ts))
}

/// Whether a queued run of one of `?2`'s tools (a JSON list) is due by `?1` or waits for a
/// retry, and its session is not paused. Two checks, the second only if the first finds
/// nothing (a `CASE`; `OR` would evaluate both):
/// - a due run: `runs_claimable_idx` alone (session, tool and `run_at` are in it), stopping
///   at the first one;
/// - a run with an attempt behind it that is not due yet (a retry waiting for its backoff), or
///   a run suspended until a time (a durable sleep, a snooze, an async tool's next check; a
///   run that waits for an event is like one awaiting approval, and is not waited for, nor is
///   one blocked by its parents or waiting for its children: the ends that release them make
///   them due in their own transaction, and a run at the far-future `run_at` of "no timeout"
///   is outside the walked range, so 100,000 blocked runs cost this check nothing):
///   such a run is delayed, so `runs_delayed_idx`, walked per tool in `run_at` order, reading
///   each row for `attempt` and stopping at the first retry. It reads only the runs due before
///   that retry, which the drain runs first anyway (and every delayed run once, when none is
///   left and the drain ends).
///
/// One check with `run_at <= ?1 OR attempt > 0` read the row of every queued run that was
/// not due, whenever it ran: 0.16 s per check with 100,000 runs enqueued for tomorrow and a
/// retry waiting. An index of retries made that a seek, but cost every claim and finish a
/// cursor on it (+1 % of a drain's instructions).
pub(crate) const WORK_WAITING: &str = "SELECT CASE WHEN EXISTS ( \
        SELECT 1 FROM runs INDEXED BY runs_claimable_idx \
        WHERE state = 'queued' AND run_at <= ?1 AND tool IN (SELECT value FROM json_each(?2)) \
        AND session_id NOT IN (SELECT value FROM pauses WHERE scope = 'session')) \
    THEN 1 ELSE EXISTS ( \
        SELECT 1 FROM runs INDEXED BY runs_delayed_idx \
        WHERE state = 'queued' AND run_at > created_at AND run_at < '9999-12-31T23:59:59.999Z' \
        AND CASE WHEN wait_kind IS NULL THEN attempt > 0 \
            ELSE wait_kind <> 'event' AND wait_kind <> 'children' AND wait_kind <> 'parents' END \
        AND tool IN (SELECT value FROM json_each(?2)) \
        AND session_id NOT IN (SELECT value FROM pauses WHERE scope = 'session')) END";

/// Whether a queued run of one of `tools` is due by `now` or waits for a retry (an earlier
/// attempt started), and not paused: what a draining worker with these tools still waits for.
pub fn has_work_for(
    conn: &Connection,
    now: DateTime<Utc>,
    tools: &[String],
) -> Result<bool, StoreError> {
    // Paused work is not waited for: a draining worker leaves it queued.
    let paused = super::flow::paused(conn)?;
    if paused.all {
        return Ok(false);
    }
    let tools: Vec<&String> = tools.iter().filter(|t| !paused.tools.contains(t)).collect();
    let tools = serde_json::to_string(&tools).map_err(|e| StoreError::Task(e.to_string()))?;
    conn.prepare_cached(WORK_WAITING)
        .ctx("prepare work check")?
        .query_row(rusqlite::params![ts(now), tools], |r| r.get(0))
        .ctx("work check")
}

/// Queued runs per tool, by tool name.
pub fn queued_by_tool(conn: &Connection) -> Result<Vec<(String, i64)>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT tool, count(*) FROM runs INDEXED BY runs_claimable_idx \
             WHERE state = 'queued' GROUP BY tool ORDER BY tool",
        )
        .ctx("prepare queued by tool")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .ctx("queued by tool")?;
    rows.collect::<Result<_, _>>().ctx("read queued by tool")
}

/// Enabled schedules that will fire again (a one-shot that fired has no next trigger).
pub fn enabled_schedules(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT count(*) FROM schedules WHERE enabled = 1 AND next_trigger_at IS NOT NULL",
        [],
        |r| r.get(0),
    )
    .optional()
    .ctx("count enabled schedules")
    .map(Option::unwrap_or_default)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store with `rows` as (id, session, tool, attempt, run_at) queued runs created at
    /// 2026-01-01T00:00:00Z.
    fn store_with(
        rows: &[(&str, &str, &str, i64, &str)],
    ) -> (tempfile::TempDir, super::super::Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = super::super::Store::open(dir.path().join("q.db")).expect("open");
        store
            .write(|tx| {
                for (id, session, tool, attempt, run_at) in rows {
                    tx.execute(
                        "INSERT INTO runs (id, session_id, tool, args, title, attempt, run_at, created_at) \
                         VALUES (?1, ?2, ?3, '{}', 't', ?4, ?5, '2026-01-01T00:00:00.000Z')",
                        rusqlite::params![id, session, tool, attempt, run_at],
                    )
                    .ctx("insert run")?;
                }
                Ok(())
            })
            .expect("insert");
        (dir, store)
    }

    fn waiting(store: &super::super::Store, tools: &[&str]) -> bool {
        let now = parse_ts(NOW).expect("instant");
        let tools: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
        store
            .read(|c| has_work_for(c, now, &tools))
            .expect("work check")
    }

    const TOMORROW: &str = "2026-01-02T00:00:00.000Z";
    const NOW: &str = "2026-01-01T00:00:00.000Z";

    #[test]
    fn future_runs_are_not_work_but_a_waiting_retry_is() {
        let future: Vec<(String, &str)> = (0..100).map(|i| (format!("bg_f{i:03}"), "s1")).collect();
        let mut rows: Vec<(&str, &str, &str, i64, &str)> = future
            .iter()
            .map(|(id, s)| (id.as_str(), *s, "echo", 0, TOMORROW))
            .collect();
        let (_dir, store) = store_with(&rows);
        assert!(!waiting(&store, &["echo"]), "only runs for tomorrow");

        rows.push(("bg_retry", "s2", "echo", 1, TOMORROW));
        let (_dir, store) = store_with(&rows);
        assert!(waiting(&store, &["echo"]), "a retry waits for its backoff");
        assert!(!waiting(&store, &["add"]), "another tool's retry");
        store
            .write(|tx| {
                tx.execute(
                    "INSERT INTO pauses (scope, value, since) VALUES ('session', 's2', ?1)",
                    [NOW],
                )
                .ctx("pause")
            })
            .expect("pause");
        assert!(!waiting(&store, &["echo"]), "the retry's session is paused");
    }

    #[test]
    fn a_due_run_is_work_unless_its_tool_or_session_is_paused() {
        let (_dir, store) = store_with(&[
            ("bg_due", "s1", "echo", 0, NOW),
            ("bg_later", "s1", "echo", 0, TOMORROW),
        ]);
        assert!(waiting(&store, &["echo", "add"]));
        assert!(!waiting(&store, &["add"]), "a worker without the tool");
        store
            .write(|tx| {
                tx.execute(
                    "INSERT INTO pauses (scope, value, since) VALUES ('tool', 'echo', ?1)",
                    [NOW],
                )
                .ctx("pause")
            })
            .expect("pause");
        assert!(!waiting(&store, &["echo"]), "the tool is paused");
        store
            .write(|tx| {
                tx.execute_batch(
                    "DELETE FROM pauses; \
                     INSERT INTO pauses (scope, value, since) VALUES ('session', 's1', '2026-01-01T00:00:00.000Z')",
                )
                .ctx("pause the session instead")
            })
            .expect("pause");
        assert!(!waiting(&store, &["echo"]), "the session is paused");
    }
}
