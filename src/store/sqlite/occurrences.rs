//! The `schedule_occurrences` table: the ledger with one row per expected schedule tick.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, Transaction, named_params};

use super::Ctx;
use super::codec::{ts, ts_req};
use crate::error::StoreError;
use crate::ids::{RunId, ScheduleId};
use crate::schedule::model::Occurrence;
use crate::store::fire_ledger::Ledger;

const RECORD: &str = "INSERT INTO schedule_occurrences (schedule_id, fire_at, outcome, run_id, \
    detail, recorded_at) SELECT :id, json_extract(value, '$[0]'), :outcome, :run_id, \
    json_extract(value, '$[1]'), :now FROM json_each(:rows) WHERE true \
    ON CONFLICT (schedule_id, fire_at) DO NOTHING";

/// Records one outcome's ticks ([`Ledger`]) in one statement; a tick already recorded keeps
/// its row.
pub(crate) fn record(
    tx: &Transaction<'_>,
    id: &ScheduleId,
    l: &Ledger<'_>,
    run: Option<&RunId>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let json: Vec<(String, &str)> = l.rows.iter().map(|(t, d)| (ts(*t), *d)).collect();
    let json = serde_json::to_string(&json).unwrap_or_else(|_| "[]".into());
    tx.prepare_cached(RECORD)
        .ctx("prepare record occurrences")?
        .execute(named_params! {
            ":id": id.as_str(), ":outcome": l.outcome, ":run_id": run.map(RunId::as_str),
            ":rows": json, ":now": ts(now),
        })
        .ctx("record occurrences")?;
    Ok(())
}

/// A schedule's ledger, newest tick first.
pub fn list(
    conn: &Connection,
    schedule_id: &str,
    limit: i64,
) -> Result<Vec<Occurrence>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT o.schedule_id, o.fire_at, o.outcome, o.run_id, r.state AS run_state, o.detail, \
             o.recorded_at FROM schedule_occurrences o LEFT JOIN runs r ON r.id = o.run_id \
             WHERE o.schedule_id = :id ORDER BY o.fire_at DESC LIMIT :limit",
        )
        .ctx("prepare occurrences")?;
    let rows = stmt
        .query_map(named_params! {":id": schedule_id, ":limit": limit}, |r| {
            Ok(Occurrence {
                schedule_id: ScheduleId::from_db(r.get("schedule_id")?),
                fire_at: ts_req(r, "fire_at")?,
                outcome: r.get("outcome")?,
                run_id: r.get::<_, Option<String>>("run_id")?.map(RunId::from_db),
                run_state: r.get("run_state")?,
                detail: r.get("detail")?,
                recorded_at: ts_req(r, "recorded_at")?,
            })
        })
        .ctx("read occurrences")?;
    rows.collect::<Result<_, _>>().ctx("read occurrences")
}
