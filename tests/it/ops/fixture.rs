//! A prepared database for the ops views and the OPS.md queries: rows with timestamps relative
//! to the real clock, because the views read strftime('now').

use chrono::{Duration, Utc};
use rusqlite::{Connection, params};

/// Fixed-width UTC text for now + `secs` (negative = in the past), by the real clock.
pub fn ago(secs: i64) -> String {
    (Utc::now() - Duration::seconds(secs))
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// Inserts a run with the given state; `set` is extra `col = value` assignments.
pub fn run(c: &Connection, id: &str, session: &str, tool: &str, state: &str, set: &str) {
    c.execute(
        "INSERT INTO runs (id, session_id, tool, args, title, state, run_at, created_at) \
         VALUES (?1, ?2, ?3, '{}', ?1, ?4, ?5, ?5)",
        params![id, session, tool, state, ago(3600)],
    )
    .unwrap();
    if !set.is_empty() {
        c.execute(&format!("UPDATE runs SET {set} WHERE id = ?1"), [id])
            .unwrap();
    }
}

/// Fills an (empty, migrated) database with one row for every case the views tell apart.
pub fn prepare(c: &Connection) {
    c.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    // Schedules: two enabled (in fire order: hourly, then daily), one disabled.
    for (id, cron, enabled, next) in [
        ("sch_daily", "0 9 * * *", 1, Some(ago(-7200))),
        ("sch_hourly", "0 * * * *", 1, Some(ago(-600))),
        ("sch_off", "*/5 * * * *", 0, None),
    ] {
        c.execute(
            "INSERT INTO schedules (id, session_id, tool, args, title, cron_expression, timezone, \
             enabled, next_trigger_at, last_triggered_at, trigger_count, created_at, updated_at) \
             VALUES (?1, 's2', 'echo', '{}', ?1, ?2, 'America/Chicago', ?3, ?4, ?5, 3, ?6, ?6)",
            params![id, cron, enabled, next, ago(3610), ago(10 * 86400)],
        )
        .unwrap();
    }
    let lease_gone = ago(60);
    let lease_ok = ago(-60);
    run(
        c,
        "bg_stuck_running",
        "s1",
        "http_request",
        "running",
        &format!(
            "attempt = 1, started_at = '{}', lease_owner = 'wk_dead', lease_token = 't', \
             lease_expires_at = '{lease_gone}', heartbeat_at = '{}', status_text = 'fetching'",
            ago(600),
            ago(90)
        ),
    );
    run(
        c,
        "bg_running_ok",
        "s1",
        "http_request",
        "running",
        &format!(
            "attempt = 1, started_at = '{}', lease_owner = 'wk_live', lease_token = 't', \
             lease_expires_at = '{lease_ok}', heartbeat_at = '{}', \
             progress = '{{\"current\": 3, \"total\": 10, \"unit\": \"pages\"}}'",
            ago(30),
            ago(1)
        ),
    );
    run(
        c,
        "bg_queued_overdue",
        "s1",
        "echo",
        "queued",
        &format!("run_at = '{}'", ago(600)),
    );
    run(
        c,
        "bg_queued_fresh",
        "s2",
        "echo",
        "queued",
        &format!("run_at = '{}'", ago(60)),
    );
    run(
        c,
        "bg_queued_later",
        "s2",
        "echo",
        "queued",
        &format!("run_at = '{}'", ago(-3600)),
    );
    run(
        c,
        "bg_awaiting",
        "s2",
        "shell",
        "awaiting_approval",
        "approval_state = 'pending'",
    );
    run(
        c,
        "bg_failed_recent",
        "s1",
        "http_request",
        "failed",
        &format!(
            "attempt = 3, max_attempts = 3, started_at = '{}', finished_at = '{}', \
             error = 'An internal error occurred while executing the tool', \
             internal_error = 'connection refused', \
             errors = '[{{\"attempt\":1,\"error\":\"timeout\"}},{{\"attempt\":2,\"error\":\"timeout\"}}]'",
            ago(7300),
            ago(7200)
        ),
    );
    run(
        c,
        "bg_failed_old",
        "s1",
        "echo",
        "failed",
        &format!(
            "attempt = 1, started_at = '{}', finished_at = '{}', error = 'bad input'",
            ago(2 * 86400 + 5),
            ago(2 * 86400)
        ),
    );
    run(
        c,
        "bg_completed",
        "s2",
        "echo",
        "completed",
        &format!(
            "attempt = 1, started_at = '{}', finished_at = '{}', schedule_id = 'sch_daily', \
             fire_at = '{}'",
            ago(3610),
            ago(3600),
            ago(3610)
        ),
    );
    run(
        c,
        "bg_cancelled",
        "s2",
        "sleep",
        "cancelled",
        &format!(
            "finished_at = '{}', error = 'cancelled by request before it started'",
            ago(300)
        ),
    );
    // Blobs and inbox rows of the finished runs.
    for (run, session) in [("bg_completed", "s2"), ("bg_failed_recent", "s1")] {
        for (name, body) in [("output.log", "[stdout] hello\n"), ("result.json", "{}")] {
            c.execute(
                "INSERT INTO blobs (session_id, path, run_id, content, size, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, CAST(?4 AS BLOB), length(?4), ?5, ?5)",
                params![session, format!("/.background/{run}/{name}"), run, body, ago(3600)],
            )
            .unwrap();
        }
    }
    c.execute(
        "INSERT INTO inbox (session_id, run_id, attempt, kind, body, created_at) VALUES \
         ('s2', 'bg_completed', 1, 'completed', 'Background run completed.', ?1), \
         ('s1', 'bg_failed_recent', 3, 'failed', 'Background run failed.', ?1), \
         ('s2', 'bg_awaiting', 0, 'approval_request', 'Approve shell?', ?1)",
        [ago(3600)],
    )
    .unwrap();
    c.execute(
        "UPDATE inbox SET read_at = ?1, acked_at = ?1 WHERE run_id = 'bg_completed'",
        [ago(1800)],
    )
    .unwrap();
    for (sched, fire, outcome, run) in [
        ("sch_daily", ago(3610), "fired", Some("bg_completed")),
        ("sch_daily", ago(86400 + 3610), "skipped_overlap", None),
        ("sch_daily", ago(9 * 86400), "fired", None),
        ("sch_hourly", ago(1200), "coalesced", None),
    ] {
        c.execute(
            "INSERT INTO schedule_occurrences (schedule_id, fire_at, outcome, run_id, recorded_at) \
             VALUES (?1, ?2, ?3, ?4, ?2)",
            params![sched, fire, outcome, run],
        )
        .unwrap();
    }
    c.execute(
        "INSERT INTO workers (id, host, boot_id, pid, process_start_time, started_at, heartbeat_at, \
         concurrency, version) VALUES ('wk_live', 'host1', 'boot', 42, '123', ?1, ?2, 64, '0.1.0')",
        params![ago(86400), ago(1)],
    )
    .unwrap();
    // An async operation: started on attempt 1, resumed by attempt 2 after a rescue.
    c.execute(
        "UPDATE runs SET operation_id = 'op_1', attempt = 2, stages = json_array( \
         json_object('stage', 'started', 'message', 'transfer of 5 started', 'at', ?1, 'attempt', 1), \
         json_object('stage', 'transferring', 'message', 'sending', 'progress', 0.5, 'at', ?2, 'attempt', 1), \
         json_object('stage', 'resumed', 'at', ?3, 'attempt', 2), \
         json_object('stage', 'completed', 'at', ?4, 'attempt', 2)) \
         WHERE id = 'bg_completed'",
        params![ago(3500), ago(3400), ago(3300), ago(3200)],
    )
    .unwrap();
}
