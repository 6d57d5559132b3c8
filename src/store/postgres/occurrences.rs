//! The `schedule_occurrences` table on Postgres: the ledger with one row per expected
//! schedule tick.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::codec::ts_req;
use super::{exec, get, query};
use crate::clock::ts;
use crate::error::StoreError;
use crate::ids::{RunId, ScheduleId};
use crate::schedule::model::Occurrence;
use crate::store::fire_ledger::Ledger;

/// A schedule's ledger, newest tick first.
pub(crate) async fn list<C: GenericClient>(
    c: &C,
    id: &str,
    limit: i64,
) -> Result<Vec<Occurrence>, StoreError> {
    let rows = query(
        c,
        "SELECT o.schedule_id, o.fire_at, o.outcome, o.run_id, r.state, o.detail, o.recorded_at \
         FROM schedule_occurrences o LEFT JOIN runs r ON r.id = o.run_id \
         WHERE o.schedule_id = $1 ORDER BY o.fire_at DESC LIMIT $2",
        &[&id, &limit],
        "occurrences",
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Occurrence {
                schedule_id: ScheduleId::from_db(get(r, 0)?),
                fire_at: ts_req(r, 1)?,
                outcome: get(r, 2)?,
                run_id: get::<Option<String>>(r, 3)?.map(RunId::from_db),
                run_state: get(r, 4)?,
                detail: get(r, 5)?,
                recorded_at: ts_req(r, 6)?,
            })
        })
        .collect()
}

/// Records one outcome's ticks ([`Ledger`]) in one statement; a tick already recorded keeps
/// its row.
pub(crate) async fn record<C: GenericClient>(
    c: &C,
    id: &ScheduleId,
    l: &Ledger<'_>,
    run: Option<&RunId>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let fire: Vec<String> = l.rows.iter().map(|(t, _)| ts(*t)).collect();
    let detail: Vec<&str> = l.rows.iter().map(|(_, d)| *d).collect();
    exec(
        c,
        "INSERT INTO schedule_occurrences (schedule_id, fire_at, outcome, run_id, detail, recorded_at) \
         SELECT $1, f, $2, $3, d, $4 FROM unnest($5::text[], $6::text[]) AS u(f, d) \
         ON CONFLICT (schedule_id, fire_at) DO NOTHING",
        &[&id.as_str(), &l.outcome, &run.map(RunId::as_str), &ts(now), &fire, &detail],
        "record occurrences",
    )
    .await?;
    Ok(())
}
