//! A prepared database for the ops views and the OPS.md queries: rows with timestamps relative
//! to the real clock, because the views read strftime('now').

use crate::support::{ENGINE, Engine, TestDb};
use chrono::{Duration, Utc};

/// Fixed-width UTC text for now + `secs` (negative = in the past), by the real clock.
pub fn ago(secs: i64) -> String {
    (Utc::now() - Duration::seconds(secs))
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// Inserts a run with the given state; `set` is extra `col = value` assignments.
pub fn run(c: &TestDb, id: &str, session: &str, tool: &str, state: &str, set: &str) {
    let at = ago(3600);
    c.exec(&format!(
        "INSERT INTO runs (id, session_id, tool, args, title, state, run_at, created_at) \
         VALUES ('{id}', '{session}', '{tool}', '{{}}', '{id}', '{state}', '{at}', '{at}')"
    ));
    if !set.is_empty() {
        c.exec(&format!("UPDATE runs SET {set} WHERE id = '{id}'"));
    }
}

/// A blob column's value from text, in the engine's SQL.
fn bytes(text: &str) -> String {
    match ENGINE {
        Engine::Sqlite => format!("CAST('{text}' AS BLOB)"),
        Engine::Postgres => format!("convert_to('{text}', 'UTF8')"),
    }
}

fn opt(v: Option<&str>) -> String {
    v.map_or("NULL".into(), |v| format!("'{v}'"))
}

/// Fills an (empty, migrated) database with one row for every case the views tell apart.
pub fn prepare(c: &TestDb) {
    // Schedules: two enabled (in fire order: hourly, then daily), one disabled.
    for (id, cron, enabled, next) in [
        ("sch_daily", "0 9 * * *", 1, Some(ago(-7200))),
        ("sch_hourly", "0 * * * *", 1, Some(ago(-600))),
        ("sch_off", "*/5 * * * *", 0, None),
    ] {
        c.exec(&format!(
            "INSERT INTO schedules (id, session_id, tool, args, title, cron_expression, timezone, \
             enabled, next_trigger_at, last_triggered_at, trigger_count, created_at, updated_at) \
             VALUES ('{id}', 's2', 'echo', '{{}}', '{id}', '{cron}', 'America/Chicago', {enabled}, \
             {}, '{}', 3, '{created}', '{created}')",
            opt(next.as_deref()),
            ago(3610),
            created = ago(10 * 86400)
        ));
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
    // Logs, results and inbox rows of the finished runs (a result is the run's own column
    // since schema version 16; the view `blobs` shows it as result.json).
    for (run, session) in [("bg_completed", "s2"), ("bg_failed_recent", "s1")] {
        let log = "[stdout] hello\n";
        c.exec(&format!(
            "INSERT INTO blob_rows (session_id, path, run_id, content, size, created_at, updated_at) \
             VALUES ('{session}', '/.background/{run}/output.log', '{run}', {}, {}, '{at}', '{at}')",
            bytes(log),
            log.len(),
            at = ago(3600)
        ));
        c.exec(&format!(
            "UPDATE runs SET result = {} WHERE id = '{run}'",
            bytes("{}")
        ));
    }
    c.exec(&format!(
        "INSERT INTO inbox (session_id, run_id, attempt, kind, body, created_at) VALUES \
         ('s2', 'bg_completed', 1, 'completed', 'Background run completed.', '{at}'), \
         ('s1', 'bg_failed_recent', 3, 'failed', 'Background run failed.', '{at}'), \
         ('s2', 'bg_awaiting', 0, 'approval_request', 'Approve shell?', '{at}')",
        at = ago(3600)
    ));
    c.exec(&format!(
        "UPDATE inbox SET read_at = '{at}', acked_at = '{at}' WHERE run_id = 'bg_completed'",
        at = ago(1800)
    ));
    for (sched, fire, outcome, run) in [
        ("sch_daily", ago(3610), "fired", Some("bg_completed")),
        ("sch_daily", ago(86400 + 3610), "skipped_overlap", None),
        ("sch_daily", ago(9 * 86400), "fired", None),
        ("sch_hourly", ago(1200), "coalesced", None),
    ] {
        c.exec(&format!(
            "INSERT INTO schedule_occurrences (schedule_id, fire_at, outcome, run_id, recorded_at) \
             VALUES ('{sched}', '{fire}', '{outcome}', {}, '{fire}')",
            opt(run)
        ));
    }
    c.exec(&format!(
        "INSERT INTO workers (id, host, boot_id, pid, process_start_time, started_at, heartbeat_at, \
         concurrency, version) VALUES ('wk_live', 'host1', 'boot', 42, '123', '{}', '{}', 64, '0.1.0')",
        ago(86400),
        ago(1)
    ));
    // An async operation: started on attempt 1, resumed by attempt 2 after a rescue.
    let stages = serde_json::json!([
        {"stage": "started", "message": "transfer of 5 started", "at": ago(3500), "attempt": 1},
        {"stage": "transferring", "message": "sending", "progress": 0.5, "at": ago(3400), "attempt": 1},
        {"stage": "resumed", "at": ago(3300), "attempt": 2},
        {"stage": "completed", "at": ago(3200), "attempt": 2},
    ]);
    c.exec(&format!(
        "UPDATE runs SET operation_id = 'op_1', attempt = 2, stages = '{stages}' \
         WHERE id = 'bg_completed'"
    ));
}
