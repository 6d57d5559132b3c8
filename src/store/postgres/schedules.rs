//! The `schedules` and `schedule_occurrences` tables on Postgres, and `claim_due`: due
//! schedules are locked with `FOR UPDATE SKIP LOCKED`, so however many workers on however
//! many hosts poll, each schedule's due tick is fired by exactly one of them; its runs are
//! keyed by (schedule, tick) (`runs_schedule_tick_idx`) and its ledger rows by (schedule,
//! tick) too.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::occurrences::record;
use super::{exec, get, query, query_one, query_opt};
use crate::clock::{parse_ts, ts};
use crate::error::StoreError;
use crate::ids::ScheduleId;
use crate::schedule::model::{ClaimReport, GateRun, NewSchedule, Schedule};
use crate::store::ClaimDue;
use crate::store::fire_ledger::{Advance, Due, FireLedger, FireWrite, plan_due, take_due};

const COLUMNS: &str = "id, session_id, tool, args, title, cron_expression, scheduled_at, timezone, \
    enabled, next_trigger_at, last_triggered_at, trigger_count, missed_policy, catchup_window_ms, \
    overlap_policy, priority, max_attempts, timeout_ms, signal_on_completion, delivery, created_at, \
    updated_at, cancelled_at, tags";

fn ts_col(r: &Row, i: usize) -> Result<Option<DateTime<Utc>>, StoreError> {
    super::codec::ts_opt(r, i)
}

fn schedule_from_row(r: &Row) -> Result<Schedule, StoreError> {
    let cron: Option<String> = get(r, 5)?;
    let args: String = get(r, 3)?;
    Ok(Schedule {
        id: ScheduleId::from_db(get(r, 0)?),
        session_id: get(r, 1)?,
        tool: get(r, 2)?,
        args: serde_json::from_str(&args).unwrap_or(serde_json::Value::Null),
        title: get(r, 4)?,
        schedule_type: if cron.is_some() {
            "recurring"
        } else {
            "oneshot"
        },
        cron_expression: cron,
        scheduled_at: ts_col(r, 6)?,
        timezone: get(r, 7)?,
        enabled: get::<i64>(r, 8)? != 0,
        next_trigger_at: ts_col(r, 9)?,
        last_triggered_at: ts_col(r, 10)?,
        trigger_count: get(r, 11)?,
        missed_policy: get::<String>(r, 12)?.parse().unwrap_or_default(),
        catchup_window_ms: get(r, 13)?,
        overlap_policy: get::<String>(r, 14)?.parse().unwrap_or_default(),
        priority: get(r, 15)?,
        max_attempts: get(r, 16)?,
        timeout_ms: get(r, 17)?,
        signal_on_completion: get::<i64>(r, 18)? != 0,
        delivery: get::<String>(r, 19)?.parse().unwrap_or_default(),
        created_at: super::codec::ts_req(r, 20)?,
        updated_at: super::codec::ts_req(r, 21)?,
        cancelled_at: ts_col(r, 22)?,
        tags: crate::run::Tags::from_json(get::<Option<&str>>(r, 23)?),
    })
}

/// Inserts an enabled schedule.
pub(crate) async fn insert<C: GenericClient>(c: &C, s: &NewSchedule) -> Result<(), StoreError> {
    exec(
        c,
        "INSERT INTO schedules (id, session_id, tool, args, title, cron_expression, scheduled_at, \
         timezone, enabled, next_trigger_at, missed_policy, catchup_window_ms, overlap_policy, \
         priority, max_attempts, timeout_ms, signal_on_completion, delivery, created_at, updated_at, tags) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $18, $19)",
        &[
            &s.id.as_str(),
            &s.session_id,
            &s.tool,
            &s.args.to_string(),
            &s.title,
            &s.cron_expression,
            &s.scheduled_at.map(ts),
            &s.timezone,
            &s.next_trigger_at.map(ts),
            &s.missed_policy.as_str(),
            &s.catchup_window_ms,
            &s.overlap_policy.as_str(),
            &s.priority,
            &s.max_attempts,
            &s.timeout_ms,
            &(s.signal_on_completion as i64),
            &s.delivery.as_str(),
            &ts(s.created_at),
            &s.tags.to_json(),
        ],
        "insert schedule",
    )
    .await?;
    Ok(())
}

/// Enabled schedules of a session, its row locks taken so the count holds until commit.
pub(crate) async fn count_active<C: GenericClient>(
    c: &C,
    session: &str,
) -> Result<i64, StoreError> {
    super::locks::take_named(c, "schedules", session).await?;
    get(
        &query_one(
            c,
            "SELECT count(*) FROM schedules WHERE session_id = $1 AND enabled = 1",
            &[&session],
            "count schedules",
        )
        .await?,
        0,
    )
}

/// Reads one schedule.
pub(crate) async fn get_one<C: GenericClient>(
    c: &C,
    id: &str,
) -> Result<Option<Schedule>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM schedules WHERE id = $1");
    query_opt(c, &sql, &[&id], "get schedule")
        .await?
        .as_ref()
        .map(schedule_from_row)
        .transpose()
}

/// Schedules (of one session, or all), newest first.
pub(crate) async fn list<C: GenericClient>(
    c: &C,
    session: Option<&str>,
    limit: i64,
) -> Result<Vec<Schedule>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM schedules WHERE ($1::text IS NULL OR session_id = $1) \
         ORDER BY created_at DESC, id DESC LIMIT $2"
    );
    query(c, &sql, &[&session, &limit], "list schedules")
        .await?
        .iter()
        .map(schedule_from_row)
        .collect()
}

/// Cancels an enabled schedule.
pub(crate) async fn cancel<C: GenericClient>(
    c: &C,
    id: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        "UPDATE schedules SET enabled = 0, next_trigger_at = NULL, cancelled_at = $1, \
         updated_at = $1 WHERE id = $2 AND enabled = 1",
        &[&ts(now), &id],
        "cancel schedule",
    )
    .await?;
    Ok(n == 1)
}

/// Disables an enabled schedule without marking it cancelled.
pub(crate) async fn disable<C: GenericClient>(
    c: &C,
    id: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        "UPDATE schedules SET enabled = 0, next_trigger_at = NULL, updated_at = $1 \
         WHERE id = $2 AND enabled = 1",
        &[&ts(now), &id],
        "disable schedule",
    )
    .await?;
    Ok(n == 1)
}

/// Enables a disabled schedule with its next tick.
pub(crate) async fn enable<C: GenericClient>(
    c: &C,
    id: &str,
    next: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = exec(
        c,
        "UPDATE schedules SET enabled = 1, next_trigger_at = $1, cancelled_at = NULL, \
         updated_at = $2 WHERE id = $3 AND enabled = 0",
        &[&ts(next), &ts(now), &id],
        "enable schedule",
    )
    .await?;
    Ok(n == 1)
}

/// The earliest next tick of an enabled schedule.
pub(crate) async fn next_due<C: GenericClient>(c: &C) -> Result<Option<DateTime<Utc>>, StoreError> {
    let row = query_one(
        c,
        "SELECT min(next_trigger_at) FROM schedules WHERE enabled = 1 AND next_trigger_at IS NOT NULL",
        &[],
        "next due",
    )
    .await?;
    Ok(get::<Option<String>>(&row, 0)?
        .as_deref()
        .and_then(parse_ts))
}

/// Enabled schedules that will fire again.
pub(crate) async fn enabled_count<C: GenericClient>(c: &C) -> Result<i64, StoreError> {
    get(
        &query_one(
            c,
            "SELECT count(*) FROM schedules WHERE enabled = 1 AND next_trigger_at IS NOT NULL",
            &[],
            "count enabled schedules",
        )
        .await?,
        0,
    )
}

/// How late the most overdue enabled schedule is, in seconds.
pub(crate) async fn lag_secs<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
) -> Result<f64, StoreError> {
    let row = query_one(
        c,
        "SELECT min(next_trigger_at) FROM schedules \
         WHERE enabled = 1 AND next_trigger_at IS NOT NULL AND next_trigger_at <= $1",
        &[&ts(now)],
        "schedule lag",
    )
    .await?;
    Ok(get::<Option<String>>(&row, 0)?
        .as_deref()
        .and_then(parse_ts)
        .map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0))
}

/// Fires due schedules in the caller's transaction (see the module docs).
pub(crate) async fn claim_due<C: GenericClient>(
    c: &C,
    p: &ClaimDue,
    gate: &GateRun,
) -> Result<ClaimReport, StoreError> {
    let now = p.now;
    let sql = format!(
        "SELECT {COLUMNS} FROM schedules WHERE enabled = 1 AND next_trigger_at IS NOT NULL \
         AND next_trigger_at <= $1 ORDER BY next_trigger_at LIMIT $2 FOR UPDATE SKIP LOCKED"
    );
    let mut due: Vec<Schedule> =
        query(c, &sql, &[&ts(now), &(p.limit as i64 + 1)], "due schedules")
            .await?
            .iter()
            .map(schedule_from_row)
            .collect::<Result<_, _>>()?;
    let mut report = take_due(&mut due, p.limit);
    if due.is_empty() {
        return Ok(report);
    }
    let last_slot = query_opt(
        c,
        "SELECT run_at FROM runs WHERE state = 'queued' AND schedule_id IS NOT NULL \
         ORDER BY run_at DESC LIMIT 1",
        &[],
        "catch-up slot",
    )
    .await?;
    let mut slot = match last_slot {
        Some(r) => parse_ts(&get::<String>(&r, 0)?),
        None => None,
    };
    let paused = super::flow::paused(c).await?;
    for s in due {
        report.schedules += 1;
        let held = paused.holds(&s.tool, &s.session_id);
        fire_one(c, p, gate, &s, held, &mut slot, &mut report).await?;
    }
    if !report.runs.is_empty() {
        super::notify(c).await?;
    }
    Ok(report)
}

async fn fire_one<C: GenericClient>(
    c: &C,
    p: &ClaimDue,
    gate: &GateRun,
    s: &Schedule,
    paused: bool,
    slot: &mut Option<DateTime<Utc>>,
    report: &mut ClaimReport,
) -> Result<(), StoreError> {
    let planned = match plan_due(s, p, report) {
        Due::Idle => return Ok(()),
        Due::Broken => return disable(c, s.id.as_str(), p.now).await.map(drop),
        Due::Planned(planned) => planned,
    };
    let busy = planned.checks_overlap() && previous_active(c, &s.id).await?;
    let ledger = FireLedger::of(&planned, s, p, (paused, busy), slot, gate);
    let mut ids = Vec::new();
    for write in &ledger.writes {
        match write {
            FireWrite::Run(row) => ids.push(super::runs::insert(c, row).await?.id().clone()),
            FireWrite::Ledger(l) => {
                let run = l.run.and_then(|i| ids.get(i));
                record(c, &s.id, l, run, p.now).await?;
            }
        }
    }
    advance(c, &s.id, &ledger.advance, p.now).await?;
    ledger.count(ids, report);
    Ok(())
}

/// Whether the schedule's previous run is still queued, awaiting approval or running.
async fn previous_active<C: GenericClient>(c: &C, id: &ScheduleId) -> Result<bool, StoreError> {
    let row = query_one(
        c,
        "SELECT EXISTS (SELECT 1 FROM runs WHERE schedule_id = $1 \
         AND (state = 'queued' OR state = 'awaiting_approval' OR state = 'running'))",
        &[&id.as_str()],
        "overlap check",
    )
    .await?;
    get::<bool>(&row, 0)
}

/// Moves the schedule on after its fire, guarded by the tick it was read with.
async fn advance<C: GenericClient>(
    c: &C,
    id: &ScheduleId,
    a: &Advance,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let n = exec(
        c,
        "UPDATE schedules SET next_trigger_at = $1, \
         last_triggered_at = coalesce($2, last_triggered_at), trigger_count = trigger_count + $3, \
         enabled = CASE WHEN $1::text IS NULL THEN 0 ELSE enabled END, updated_at = $4 \
         WHERE id = $5 AND enabled = 1 AND next_trigger_at = $6",
        &[
            &a.next.map(ts),
            &a.last.map(ts),
            &a.runs,
            &ts(now),
            &id.as_str(),
            &ts(a.due),
        ],
        "advance schedule",
    )
    .await?;
    if n != 1 {
        // The row is locked by this transaction: a mismatch is a bug.
        return Err(StoreError::Invalid(format!(
            "advance schedule {id}: changed {n} rows"
        )));
    }
    Ok(())
}
