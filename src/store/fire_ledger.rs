//! A schedule fire's bookkeeping, decided once for both engines: for one due schedule, which
//! runs it inserts and which ledger rows it records, in what order, how the claim's report
//! counts them, and how the schedule is advanced. An engine's `claim_due` only runs the
//! queries: it reads the due schedules, asks [`FireLedger::of`], writes what the ledger lists
//! ([`FireWrite`]) and applies its [`Advance`].

use chrono::{DateTime, Duration, Utc};

use super::types::ClaimDue;
use crate::ids::RunId;
use crate::run::NewRun;
use crate::schedule::OverlapPolicy;
use crate::schedule::fire::{LedgerRow, Plan, PlanInput, plan};
use crate::schedule::model::{ClaimReport, GateRun, Schedule};
use crate::schedule::spec::ScheduleSpec;

/// Takes the schedules a claim handles from those read (at most `limit`; the query asks for
/// one more to learn whether more are due) and starts the claim's report.
pub(crate) fn take_due(due: &mut Vec<Schedule>, limit: usize) -> ClaimReport {
    let report = ClaimReport {
        more: due.len() > limit,
        ..Default::default()
    };
    due.truncate(limit);
    report
}

/// What a due schedule does before anything is written.
pub(crate) enum Due {
    /// It has no next tick: nothing to do.
    Idle,
    /// Its stored cron or instant no longer fires: reported broken (in the claim's report);
    /// the engine disables it.
    Broken,
    /// Its tick is due: the plan for it.
    Planned(Planned),
}

/// A due schedule's plan, before the overlap check.
pub(crate) struct Planned {
    due: DateTime<Utc>,
    plan: Plan,
    checks_overlap: bool,
}

/// Plans the due tick of `s` at `p.now` ([`crate::schedule::fire::plan`]); a schedule
/// whose spec no longer fires goes in `report` as broken, with why.
pub(crate) fn plan_due(s: &Schedule, p: &ClaimDue, report: &mut ClaimReport) -> Due {
    let Some(due) = s.next_trigger_at else {
        return Due::Idle;
    };
    let spec = match ScheduleSpec::from_stored(
        s.cron_expression.as_deref(),
        s.scheduled_at,
        &s.timezone,
        due - Duration::seconds(1),
    ) {
        Ok(spec) => spec,
        Err(e) => {
            report.broken.push((s.id.to_string(), e.to_string()));
            return Due::Broken;
        }
    };
    let input = PlanInput {
        due,
        now: p.now,
        policy: s.missed_policy,
        window: s.catchup_window_ms.map(Duration::milliseconds),
        late_after: p.late_after,
    };
    Due::Planned(Planned {
        due,
        plan: plan(&spec, input),
        checks_overlap: s.overlap_policy == OverlapPolicy::Skip,
    })
}

impl Planned {
    /// Whether the engine must ask if the schedule's previous run is still active (its
    /// overlap policy skips a tick then); the answer is `busy` in [`FireLedger::of`].
    pub(crate) fn checks_overlap(&self) -> bool {
        self.checks_overlap
    }
}

/// One write of a fire, in the order the engine performs them.
pub(crate) enum FireWrite<'p> {
    /// Insert this run (keyed by schedule and tick); its id is the next in the inserted list.
    Run(Box<NewRun>),
    /// Record these ledger rows (never none).
    Ledger(Ledger<'p>),
}

/// Ticks of one outcome, recorded in one statement, since a long outage lists many. A tick
/// already recorded keeps its row.
pub(crate) struct Ledger<'p> {
    /// `fired`, `coalesced`, `missed`, `skipped_overlap` or `paused`.
    pub(crate) outcome: &'static str,
    /// The run the rows are about, if any: its index among the fire's inserted runs.
    pub(crate) run: Option<usize>,
    /// The ticks, each with its detail.
    pub(crate) rows: Vec<LedgerRow<'p>>,
}

/// How the schedule row moves on: guarded by the `due` tick it was read with, so a tick
/// fires once however many workers poll.
pub(crate) struct Advance {
    /// The new next_trigger_at (`None` disables the schedule: a one-shot that fired).
    pub(crate) next: Option<DateTime<Utc>>,
    /// The new last_triggered_at, if a run started.
    pub(crate) last: Option<DateTime<Utc>>,
    /// Runs started (added to trigger_count).
    pub(crate) runs: i64,
    /// The next_trigger_at the schedule was read with.
    pub(crate) due: DateTime<Utc>,
}

/// Everything one due schedule's fire writes.
pub(crate) struct FireLedger<'p> {
    /// The writes, in order.
    pub(crate) writes: Vec<FireWrite<'p>>,
    /// The schedule's advance, after the writes.
    pub(crate) advance: Advance,
}

impl<'p> FireLedger<'p> {
    /// The writes of `planned` for `s`: each fire starts a run (due at its tick, or spread
    /// after the previous catch-up, `slot`) and records its ticks, unless the schedule's tool
    /// or session is `paused` (all its ticks `paused`) or its previous run is still active
    /// (`busy`: `skipped_overlap`, and `missed` for the ticks it stood for); then the plan's
    /// missed ticks. `gate` decides whether each run waits for approval.
    pub(crate) fn of(
        planned: &'p Planned,
        s: &Schedule,
        p: &ClaimDue,
        (paused, busy): (bool, bool),
        slot: &mut Option<DateTime<Utc>>,
        gate: &GateRun,
    ) -> Self {
        let mut writes = Vec::new();
        let mut runs = 0usize;
        let mut last = None;
        for fire in &planned.plan.fires {
            if paused {
                ledger(&mut writes, "paused", None, fire.paused_rows());
            } else if busy {
                let (skipped, missed) = fire.overlap_rows();
                ledger(&mut writes, "skipped_overlap", None, skipped.to_vec());
                ledger(&mut writes, "missed", None, missed);
            } else {
                let run_at = fire.run_at(slot, p.catchup_spacing, p.now);
                let (fired, coalesced) = fire.fired_rows();
                writes.push(FireWrite::Run(Box::new(
                    fire.new_run(s, run_at, p.now, gate),
                )));
                ledger(&mut writes, "fired", Some(runs), fired.to_vec());
                ledger(&mut writes, "coalesced", Some(runs), coalesced);
                runs += 1;
                last = Some(fire.fire_at);
            }
        }
        let missed = planned.plan.missed.iter();
        ledger(
            &mut writes,
            "missed",
            None,
            missed.map(|(t, why)| (*t, why.as_str())).collect(),
        );
        let advance = Advance {
            next: planned.plan.next,
            last,
            runs: runs as i64,
            due: planned.due,
        };
        Self { writes, advance }
    }

    /// Counts what was written into the claim's report: the runs inserted (`ids`, in insert
    /// order) and the ticks recorded per outcome.
    pub(crate) fn count(&self, ids: Vec<RunId>, report: &mut ClaimReport) {
        for write in &self.writes {
            let FireWrite::Ledger(Ledger { outcome, rows, .. }) = write else {
                continue;
            };
            let n = rows.len();
            match *outcome {
                "fired" => report.fired += n,
                "coalesced" => report.coalesced += n,
                "skipped_overlap" => report.skipped_overlap += n,
                "paused" => report.paused += n,
                _ => report.missed += n,
            }
        }
        report.runs.extend(ids);
    }
}

/// Adds the ledger rows of one outcome to `writes`; an outcome with no ticks writes nothing.
fn ledger<'p>(
    writes: &mut Vec<FireWrite<'p>>,
    outcome: &'static str,
    run: Option<usize>,
    rows: Vec<LedgerRow<'p>>,
) {
    if !rows.is_empty() {
        writes.push(FireWrite::Ledger(Ledger { outcome, run, rows }));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::TimeZone;

    use super::*;
    use crate::ids::ScheduleId;
    use crate::schedule::MissedPolicy;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 8, h, m, s)
            .single()
            .expect("a time")
    }

    fn every_five_minutes(next: Option<DateTime<Utc>>) -> Schedule {
        Schedule {
            id: ScheduleId::generate(),
            session_id: "default".into(),
            tool: "echo".into(),
            args: serde_json::json!({}),
            title: "tick".into(),
            schedule_type: "recurring",
            cron_expression: Some("*/5 * * * *".into()),
            scheduled_at: None,
            timezone: "UTC".into(),
            enabled: true,
            next_trigger_at: next,
            last_triggered_at: None,
            trigger_count: 0,
            missed_policy: MissedPolicy::Once,
            catchup_window_ms: None,
            overlap_policy: OverlapPolicy::Skip,
            priority: 0,
            max_attempts: 1,
            timeout_ms: None,
            signal_on_completion: false,
            delivery: Default::default(),
            created_at: at(9, 0, 0),
            updated_at: at(9, 0, 0),
            cancelled_at: None,
            tags: crate::run::Tags::new(),
        }
    }

    fn claim() -> ClaimDue {
        ClaimDue {
            now: at(10, 5, 1),
            limit: 10,
            late_after: Duration::seconds(30),
            catchup_spacing: Duration::seconds(1),
        }
    }

    fn planned(s: &Schedule, report: &mut ClaimReport) -> Planned {
        match plan_due(s, &claim(), report) {
            Due::Planned(p) => p,
            Due::Idle | Due::Broken => panic!("a due schedule is planned"),
        }
    }

    fn outcomes(ledger: &FireLedger<'_>) -> Vec<(&'static str, Option<usize>, usize)> {
        ledger
            .writes
            .iter()
            .map(|w| match w {
                FireWrite::Run(_) => ("run", None, 0),
                FireWrite::Ledger(l) => (l.outcome, l.run, l.rows.len()),
            })
            .collect()
    }

    #[test]
    fn an_on_time_tick_inserts_its_run_then_its_fired_row_and_moves_on() {
        let s = every_five_minutes(Some(at(10, 5, 0)));
        let mut report = take_due(&mut vec![s.clone()], 10);
        let planned = planned(&s, &mut report);
        assert!(planned.checks_overlap());
        let gate: GateRun = Arc::new(|_, _| None);
        let mut slot = None;
        let ledger = FireLedger::of(&planned, &s, &claim(), (false, false), &mut slot, &gate);
        assert_eq!(outcomes(&ledger), [("run", None, 0), ("fired", Some(0), 1)]);
        let a = &ledger.advance;
        assert_eq!(
            (a.next, a.last, a.runs, a.due),
            (Some(at(10, 10, 0)), Some(at(10, 5, 0)), 1, at(10, 5, 0))
        );
        let id = crate::ids::RunId::generate();
        ledger.count(vec![id.clone()], &mut report);
        assert_eq!((report.fired, report.runs), (1, vec![id]));
    }

    #[test]
    fn a_paused_or_busy_schedule_records_its_tick_and_starts_nothing() {
        let s = every_five_minutes(Some(at(10, 5, 0)));
        let mut report = ClaimReport::default();
        let planned = planned(&s, &mut report);
        let gate: GateRun = Arc::new(|_, _| None);
        for (held, want) in [
            ((true, false), "paused"),
            ((false, true), "skipped_overlap"),
        ] {
            let ledger = FireLedger::of(&planned, &s, &claim(), held, &mut None, &gate);
            assert_eq!(outcomes(&ledger), [(want, None, 1)]);
            assert_eq!((ledger.advance.runs, ledger.advance.last), (0, None));
            ledger.count(Vec::new(), &mut report);
        }
        assert_eq!(
            (report.paused, report.skipped_overlap, report.fired),
            (1, 1, 0)
        );
    }

    #[test]
    fn a_schedule_that_no_longer_fires_is_reported_broken_and_one_not_due_is_idle() {
        let mut broken = every_five_minutes(Some(at(10, 5, 0)));
        broken.cron_expression = Some("not a cron".into());
        let mut report = ClaimReport::default();
        assert!(matches!(
            plan_due(&broken, &claim(), &mut report),
            Due::Broken
        ));
        assert_eq!(report.broken.len(), 1);
        let idle = every_five_minutes(None);
        assert!(matches!(plan_due(&idle, &claim(), &mut report), Due::Idle));
    }
}
