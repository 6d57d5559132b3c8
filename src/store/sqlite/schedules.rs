//! The `schedules` and `schedule_occurrences` tables: insert, read, cancel/enable, and
//! `claim_due`, which fires due ticks and writes their runs and ledger rows in one transaction.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, named_params};

use super::Ctx;
use super::codec::{parse_ts, ts, ts_col, ts_req};
use super::occurrences::record;
use crate::error::StoreError;
use crate::ids::ScheduleId;
use crate::schedule::model::{ClaimReport, GateRun, NewSchedule, Schedule};
use crate::store::ClaimDue;
use crate::store::fire_ledger::{Advance, Due, FireLedger, FireWrite, plan_due, take_due};

const COLUMNS: &str = "id, session_id, tool, args, title, cron_expression, scheduled_at, timezone, \
    enabled, next_trigger_at, last_triggered_at, trigger_count, missed_policy, catchup_window_ms, \
    overlap_policy, priority, max_attempts, timeout_ms, signal_on_completion, delivery, created_at, \
    updated_at, cancelled_at, tags";

fn schedule_from_row(row: &Row<'_>) -> rusqlite::Result<Schedule> {
    let cron: Option<String> = row.get("cron_expression")?;
    let args: String = row.get("args")?;
    Ok(Schedule {
        id: ScheduleId::from_db(row.get("id")?),
        session_id: row.get("session_id")?,
        tool: row.get("tool")?,
        args: serde_json::from_str(&args).unwrap_or(serde_json::Value::Null),
        title: row.get("title")?,
        schedule_type: if cron.is_some() {
            "recurring"
        } else {
            "oneshot"
        },
        cron_expression: cron,
        scheduled_at: ts_col(row, "scheduled_at")?,
        timezone: row.get("timezone")?,
        enabled: row.get::<_, i64>("enabled")? != 0,
        next_trigger_at: ts_col(row, "next_trigger_at")?,
        last_triggered_at: ts_col(row, "last_triggered_at")?,
        trigger_count: row.get("trigger_count")?,
        missed_policy: row
            .get::<_, String>("missed_policy")?
            .parse()
            .unwrap_or_default(),
        catchup_window_ms: row.get("catchup_window_ms")?,
        overlap_policy: row
            .get::<_, String>("overlap_policy")?
            .parse()
            .unwrap_or_default(),
        priority: row.get("priority")?,
        max_attempts: row.get("max_attempts")?,
        timeout_ms: row.get("timeout_ms")?,
        signal_on_completion: row.get::<_, i64>("signal_on_completion")? != 0,
        delivery: row
            .get::<_, String>("delivery")?
            .parse()
            .unwrap_or_default(),
        created_at: ts_req(row, "created_at")?,
        updated_at: ts_req(row, "updated_at")?,
        cancelled_at: ts_col(row, "cancelled_at")?,
        tags: crate::run::Tags::from_json(row.get::<_, Option<String>>("tags")?.as_deref()),
    })
}

const INSERT: &str = "INSERT INTO schedules (id, session_id, tool, args, title, cron_expression, \
    scheduled_at, timezone, enabled, next_trigger_at, missed_policy, catchup_window_ms, overlap_policy, \
    priority, max_attempts, timeout_ms, signal_on_completion, delivery, created_at, updated_at, tags) \
    VALUES (:id, :session_id, :tool, :args, :title, :cron, :scheduled_at, :timezone, 1, :next, :missed, \
    :window, :overlap, :priority, :max_attempts, :timeout_ms, :signal, :delivery, :now, :now, :tags)";

/// Inserts an enabled schedule.
pub fn insert(tx: &Transaction<'_>, s: &NewSchedule) -> Result<(), StoreError> {
    tx.prepare_cached(INSERT)
        .ctx("prepare insert schedule")?
        .execute(named_params! {
            ":id": s.id.as_str(),
            ":session_id": s.session_id,
            ":tool": s.tool,
            ":args": s.args.to_string(),
            ":title": s.title,
            ":cron": s.cron_expression,
            ":scheduled_at": s.scheduled_at.map(ts),
            ":timezone": s.timezone,
            ":next": s.next_trigger_at.map(ts),
            ":missed": s.missed_policy.as_str(),
            ":window": s.catchup_window_ms,
            ":overlap": s.overlap_policy.as_str(),
            ":priority": s.priority,
            ":max_attempts": s.max_attempts,
            ":timeout_ms": s.timeout_ms,
            ":signal": s.signal_on_completion as i64,
            ":delivery": s.delivery.as_str(),
            ":now": ts(s.created_at),
            ":tags": s.tags.to_json(),
        })
        .ctx("insert schedule")?;
    Ok(())
}

/// Reads one schedule.
pub fn get(conn: &Connection, id: &str) -> Result<Option<Schedule>, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE id = ?1"))
        .ctx("prepare get schedule")?
        .query_row([id], schedule_from_row)
        .optional()
        .ctx("get schedule")
}

/// Lists schedules (of one session, or all), newest first.
pub fn list(
    conn: &Connection,
    session: Option<&str>,
    limit: i64,
) -> Result<Vec<Schedule>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM schedules WHERE (:session IS NULL OR session_id = :session) \
         ORDER BY created_at DESC, id DESC LIMIT :limit"
    );
    let mut stmt = conn.prepare_cached(&sql).ctx("prepare list schedules")?;
    let rows = stmt
        .query_map(
            named_params! {":session": session, ":limit": limit},
            schedule_from_row,
        )
        .ctx("list schedules")?;
    rows.collect::<Result<_, _>>().ctx("read schedules")
}

/// Enabled schedules of a session (the per-session limit counts these).
pub fn count_active(conn: &Connection, session: &str) -> Result<i64, StoreError> {
    conn.prepare_cached("SELECT count(*) FROM schedules WHERE session_id = ?1 AND enabled = 1")
        .ctx("prepare count schedules")?
        .query_row([session], |r| r.get(0))
        .ctx("count schedules")
}

/// Cancels an enabled schedule: no more ticks. Returns false if it was not enabled.
pub fn cancel(tx: &Transaction<'_>, id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE schedules SET enabled = 0, next_trigger_at = NULL, cancelled_at = :now, \
             updated_at = :now WHERE id = :id AND enabled = 1",
        )
        .ctx("prepare cancel schedule")?
        .execute(named_params! {":now": ts(now), ":id": id})
        .ctx("cancel schedule")?;
    Ok(n == 1)
}

/// Disables a schedule without marking it cancelled (a one-shot that fired, a cron that stopped
/// firing). Returns false if it was not enabled.
pub fn disable(tx: &Transaction<'_>, id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE schedules SET enabled = 0, next_trigger_at = NULL, updated_at = :now \
             WHERE id = :id AND enabled = 1",
        )
        .ctx("prepare disable schedule")?
        .execute(named_params! {":now": ts(now), ":id": id})
        .ctx("disable schedule")?;
    Ok(n == 1)
}

/// Enables a disabled schedule with its next tick. Returns false if it was already enabled.
pub fn enable(
    tx: &Transaction<'_>,
    id: &str,
    next: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE schedules SET enabled = 1, next_trigger_at = :next, cancelled_at = NULL, \
             updated_at = :now WHERE id = :id AND enabled = 0",
        )
        .ctx("prepare enable schedule")?
        .execute(named_params! {":next": ts(next), ":now": ts(now), ":id": id})
        .ctx("enable schedule")?;
    Ok(n == 1)
}

/// The earliest next_trigger_at of an enabled schedule (to sleep until it).
pub fn next_due(conn: &Connection) -> Result<Option<DateTime<Utc>>, StoreError> {
    let s: Option<String> = conn
        .prepare_cached(
            "SELECT min(next_trigger_at) FROM schedules \
             WHERE enabled = 1 AND next_trigger_at IS NOT NULL",
        )
        .ctx("prepare next due")?
        .query_row([], |r| r.get(0))
        .ctx("next due")?;
    Ok(s.as_deref().and_then(parse_ts))
}

const DUE: &str = "SELECT {cols} FROM schedules WHERE enabled = 1 AND next_trigger_at IS NOT NULL \
    AND next_trigger_at <= :now ORDER BY next_trigger_at LIMIT :limit";
// The condition of runs_schedule_active_idx, word for word, so the planner can use it.
const ACTIVE_RUN: &str = "SELECT EXISTS (SELECT 1 FROM runs WHERE schedule_id = ?1 \
    AND (state = 'queued' OR state = 'awaiting_approval' OR state = 'running'))";
const LAST_CATCHUP_SLOT: &str = "SELECT run_at FROM runs INDEXED BY runs_schedule_catchup_idx \
    WHERE state = 'queued' AND schedule_id IS NOT NULL ORDER BY run_at DESC LIMIT 1";
const ADVANCE: &str = "UPDATE schedules SET next_trigger_at = :next, \
    last_triggered_at = coalesce(:last, last_triggered_at), trigger_count = trigger_count + :runs, \
    enabled = CASE WHEN :next IS NULL THEN 0 ELSE enabled END, updated_at = :now \
    WHERE id = :id AND enabled = 1 AND next_trigger_at = :due";
/// Fires due schedules: for each enabled schedule whose next_trigger_at ≤ now, in this one
/// transaction, plans its ticks ([`crate::schedule::fire::plan`]), inserts its runs keyed by
/// (schedule, fire time), writes a ledger row for every tick, and advances next_trigger_at,
/// last_triggered_at and trigger_count (a one-shot is disabled). The advance is guarded by the
/// next_trigger_at it read, so however many workers poll, a tick fires once.
pub fn claim_due(
    tx: &Transaction<'_>,
    p: &ClaimDue,
    gate: &GateRun,
) -> Result<ClaimReport, StoreError> {
    let now = p.now;
    let mut due: Vec<Schedule> = tx
        .prepare_cached(&DUE.replace("{cols}", COLUMNS))
        .ctx("prepare due schedules")?
        .query_map(
            named_params! {":now": ts(now), ":limit": p.limit as i64 + 1},
            schedule_from_row,
        )
        .ctx("due schedules")?
        .collect::<Result<_, _>>()
        .ctx("read due schedules")?;
    let mut report = take_due(&mut due, p.limit);
    let last_slot: Option<String> = tx
        .prepare_cached(LAST_CATCHUP_SLOT)
        .ctx("prepare catch-up slot")?
        .query_row([], |r| r.get(0))
        .optional()
        .ctx("catch-up slot")?;
    let mut slot = last_slot.as_deref().and_then(parse_ts);
    let paused = super::flow::paused(tx)?;
    for s in due {
        report.schedules += 1;
        let held = paused.holds(&s.tool, &s.session_id);
        fire_one(tx, p, gate, &s, held, &mut slot, &mut report)?;
    }
    Ok(report)
}

fn fire_one(
    tx: &Transaction<'_>,
    p: &ClaimDue,
    gate: &GateRun,
    s: &Schedule,
    paused: bool,
    slot: &mut Option<DateTime<Utc>>,
    report: &mut ClaimReport,
) -> Result<(), StoreError> {
    let planned = match plan_due(s, p, report) {
        Due::Idle => return Ok(()),
        Due::Broken => return disable(tx, s.id.as_str(), p.now).map(drop),
        Due::Planned(planned) => planned,
    };
    let busy = planned.checks_overlap()
        && tx
            .prepare_cached(ACTIVE_RUN)
            .ctx("prepare overlap check")?
            .query_row([s.id.as_str()], |r| r.get::<_, bool>(0))
            .ctx("overlap check")?;
    let ledger = FireLedger::of(&planned, s, p, (paused, busy), slot, gate);
    let mut ids = Vec::new();
    for write in &ledger.writes {
        match write {
            FireWrite::Run(row) => ids.push(super::runs::insert(tx, row)?.id().clone()),
            FireWrite::Ledger(l) => {
                let run = l.run.and_then(|i| ids.get(i));
                record(tx, &s.id, l, run, p.now)?;
            }
        }
    }
    advance(tx, &s.id, &ledger.advance, p.now)?;
    ledger.count(ids, report);
    Ok(())
}

/// Moves the schedule on after its fire, guarded by the tick it was read with.
fn advance(
    tx: &Transaction<'_>,
    id: &ScheduleId,
    a: &Advance,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let n = tx
        .prepare_cached(ADVANCE)
        .ctx("prepare advance schedule")?
        .execute(named_params! {
            ":next": a.next.map(ts), ":last": a.last.map(ts), ":runs": a.runs,
            ":now": ts(now), ":id": id.as_str(), ":due": ts(a.due),
        })
        .ctx("advance schedule")?;
    if n != 1 {
        // Read in this same transaction, so it cannot change under us; a mismatch is a bug.
        return Err(StoreError::sqlite(
            format!("advance schedule {id}"),
            rusqlite::Error::StatementChangedRows(n),
        ));
    }
    Ok(())
}
