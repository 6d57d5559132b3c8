//! What to do with a due schedule (pure): which ticks fire, which were missed, whether one
//! catch-up run stands for several ticks, and the next regular tick on the schedule's grid.

use chrono::{DateTime, Duration, Utc};

use super::spec::{MissedPolicy, ScheduleSpec};

/// At most this many ticks are listed in the ledger for one claim; after an outage longer than
/// that, the ledger notes the gap instead of listing every tick.
pub const MAX_LISTED_TICKS: usize = 1000;

/// One row of a schedule's occurrence ledger: the tick and the reason recorded with it.
pub type LedgerRow<'a> = (DateTime<Utc>, &'a str);

/// How a due schedule is to be handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Runs to start, in tick order.
    pub fires: Vec<Fire>,
    /// Ticks that get no run, each with the reason recorded in the ledger.
    pub missed: Vec<(DateTime<Utc>, String)>,
    /// The next regular tick (strictly after `now`, on the grid); None when exhausted.
    pub next: Option<DateTime<Utc>>,
}

/// One run a due schedule starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    /// The tick this run is keyed by (runs.fire_at).
    pub fire_at: DateTime<Utc>,
    /// Earlier missed ticks this run also stands for (ledger outcome `coalesced`).
    pub coalesced: Vec<DateTime<Utc>>,
    /// Fired late (after downtime): its start is spread by the catch-up rate.
    pub catch_up: bool,
    /// Ledger detail for the tick.
    pub detail: Option<String>,
}

impl Fire {
    /// How many ticks this run stands for (runs.ticks).
    pub fn ticks(&self) -> i64 {
        1 + self.coalesced.len() as i64
    }

    /// The ledger rows of a fire that gets no run because its tool or session (or everything)
    /// is paused: the ticks it stood for and its own, all as `paused`.
    pub fn paused_rows(&self) -> Vec<LedgerRow<'static>> {
        let why = "paused: the schedule's tool or session (or everything) was paused";
        let mut rows: Vec<_> = self.coalesced.iter().map(|&t| (t, why)).collect();
        rows.push((self.fire_at, why));
        rows
    }

    /// The ledger rows of a fire skipped because the schedule's previous run is still active:
    /// its tick (`skipped_overlap`), and the ticks it would have stood for (`missed`).
    pub fn overlap_rows(&self) -> ([LedgerRow<'static>; 1], Vec<LedgerRow<'static>>) {
        let why = "missed: its catch-up was skipped because the previous run was still active";
        (
            [(self.fire_at, "the previous run was still active")],
            self.coalesced.iter().map(|&t| (t, why)).collect(),
        )
    }

    /// The ledger rows of a fire that started a run: its tick (`fired`, with the plan's detail),
    /// and the ticks the run stands for (`coalesced`).
    pub fn fired_rows(&self) -> ([LedgerRow<'_>; 1], Vec<LedgerRow<'static>>) {
        let why = "missed: coalesced into the catch-up run";
        (
            [(
                self.fire_at,
                self.detail.as_deref().unwrap_or("fired on time"),
            )],
            self.coalesced.iter().map(|&t| (t, why)).collect(),
        )
    }

    /// When this fire's run is due: at its tick (never later than `now`), or, for a catch-up,
    /// at least `spacing` after the previous catch-up of this claim (`slot`, which it advances),
    /// so the starts after an outage are spread.
    pub fn run_at(
        &self,
        slot: &mut Option<DateTime<Utc>>,
        spacing: Duration,
        now: DateTime<Utc>,
    ) -> DateTime<Utc> {
        if !self.catch_up {
            return self.fire_at.min(now);
        }
        let at = slot.map_or(now, |s| (s + spacing).max(now));
        *slot = Some(at);
        at
    }

    /// The run this fire of `s` starts (keyed by schedule and tick), due at `run_at`; both
    /// engines insert exactly this row, after `gate` (the claiming process's approval rules)
    /// has said whether it waits for approval.
    pub fn new_run(
        &self,
        s: &crate::schedule::model::Schedule,
        run_at: DateTime<Utc>,
        now: DateTime<Utc>,
        gate: &crate::schedule::model::GateRun,
    ) -> crate::run::NewRun {
        let mut row = crate::run::NewRun {
            id: crate::ids::RunId::generate(),
            session_id: s.session_id.clone(),
            tool: s.tool.clone(),
            args: s.args.to_string(),
            title: s.title.clone(),
            priority: s.priority,
            max_attempts: s.max_attempts,
            run_at,
            created_at: now,
            idempotency_key: None,
            timeout_ms: s.timeout_ms,
            signal_on_completion: s.signal_on_completion,
            delivery: s.delivery,
            schedule_id: Some(s.id.clone()),
            fire_at: Some(self.fire_at),
            ticks: self.ticks(),
            unique: None,
            approval: None,
            batch_id: None,
            parent_run_id: None,
            after: Vec::new(),
            after_mode: crate::run::DepMode::All,
            tags: s.tags.clone(),
            // A fired run starts a new trace: no enqueuing span to continue.
            traceparent: None,
        };
        row.approval = gate(&row, &s.args);
        row
    }
}

/// Inputs to [`plan`] besides the spec.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput {
    /// The stored next_trigger_at: the earliest unhandled tick (≤ now).
    pub due: DateTime<Utc>,
    /// The current time.
    pub now: DateTime<Utc>,
    /// The schedule's missed-ticks policy.
    pub policy: MissedPolicy,
    /// The schedule's catch-up window; None means one period (unlimited for a one-shot).
    pub window: Option<Duration>,
    /// A single due tick fired within this much of its time is on time, not missed.
    pub late_after: Duration,
}

/// Decides what a due schedule does at `now`. Ticks are enumerated from `due` up to `now`:
/// - one tick, at most `late_after` late: it fires normally;
/// - otherwise the ticks were missed, and the policy decides: `skip` runs none; `once` runs
///   one catch-up (keyed by the latest tick, standing for all of them) if the latest lies
///   within the window; `all` runs every tick within the window.
///
/// Ticks outside the window, or skipped by policy, are listed as missed with a reason.
pub fn plan(spec: &ScheduleSpec, p: PlanInput) -> Plan {
    let (ticks, gap, next) = due_ticks(spec, p.due, p.now);
    let mut out = Plan {
        fires: Vec::new(),
        missed: Vec::new(),
        next,
    };
    let Some(&latest) = ticks.last() else {
        return out;
    };
    if ticks.len() == 1 && gap.is_none() && p.now - latest <= p.late_after {
        out.fires.push(Fire {
            fire_at: latest,
            coalesced: Vec::new(),
            catch_up: false,
            detail: None,
        });
        return out;
    }
    let window = p.window.or_else(|| match (spec, next) {
        (ScheduleSpec::Cron(_), Some(n)) => Some(n - latest),
        _ => None,
    });
    let within = |t: DateTime<Utc>| window.is_none_or(|w| p.now - t <= w);
    let missed = Missed { ticks: &ticks, gap };
    match p.policy {
        MissedPolicy::Skip => out.missed = missed.all("missed: missed-ticks policy is skip"),
        MissedPolicy::Once if within(latest) => out.fires.push(missed.one_catch_up(latest)),
        MissedPolicy::Once => out.missed = missed.all(OUTSIDE),
        MissedPolicy::All => (out.fires, out.missed) = missed.each_within(within),
    }
    out
}

/// Why a tick outside the catch-up window gets no run.
const OUTSIDE: &str = "missed: outside the catch-up window";

/// Ticks that were missed (not one tick fired on time), and the tick before a jump in their
/// listing, if any: what each missed-ticks policy decides over.
struct Missed<'a> {
    ticks: &'a [DateTime<Utc>],
    gap: Option<DateTime<Utc>>,
}

impl Missed<'_> {
    /// The ledger reason of a tick that gets no run: `why`, and a note at the gap.
    fn reason(&self, t: DateTime<Utc>, why: &str) -> String {
        if self.gap == Some(t) {
            format!(
                "{why}; ticks after this one up to the next listed were not listed (at most {MAX_LISTED_TICKS} per catch-up)"
            )
        } else {
            why.to_string()
        }
    }

    /// No tick gets a run; each is listed with `why`.
    fn all(&self, why: &str) -> Vec<(DateTime<Utc>, String)> {
        self.ticks
            .iter()
            .map(|&t| (t, self.reason(t, why)))
            .collect()
    }

    /// `once`: one catch-up run keyed by the `latest` tick, standing for all of them.
    fn one_catch_up(&self, latest: DateTime<Utc>) -> Fire {
        let mut detail = format!(
            "catch-up run standing for {} missed tick(s)",
            self.ticks.len()
        );
        if self.gap.is_some() {
            detail.push_str(&format!(
                "; more ticks were missed than listed (at most {MAX_LISTED_TICKS} per catch-up)"
            ));
        }
        Fire {
            fire_at: latest,
            coalesced: self.ticks[..self.ticks.len() - 1].to_vec(),
            catch_up: true,
            detail: Some(detail),
        }
    }

    /// `all`: a catch-up run for each tick `within` the window; the others are missed.
    fn each_within(
        &self,
        within: impl Fn(DateTime<Utc>) -> bool,
    ) -> (Vec<Fire>, Vec<(DateTime<Utc>, String)>) {
        let (mut fires, mut missed) = (Vec::new(), Vec::new());
        for &t in self.ticks {
            if within(t) {
                fires.push(Fire {
                    fire_at: t,
                    coalesced: Vec::new(),
                    catch_up: true,
                    detail: Some("catch-up run for a missed tick".into()),
                });
            } else {
                missed.push((t, self.reason(t, OUTSIDE)));
            }
        }
        (fires, missed)
    }
}

/// Due ticks, the tick before a jump in the listing (if any), and the next tick after now.
type DueTicks = (
    Vec<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
);

/// Ticks from `due` to `now` inclusive (at most about [`MAX_LISTED_TICKS`]; after that the
/// enumeration jumps to the last stretch before `now`, returning the tick before the jump as
/// the gap), and the next tick after `now`.
fn due_ticks(spec: &ScheduleSpec, due: DateTime<Utc>, now: DateTime<Utc>) -> DueTicks {
    if let ScheduleSpec::Once(at) = spec {
        return (
            (*at <= now).then_some(vec![*at]).unwrap_or_default(),
            None,
            None,
        );
    }
    let mut ticks = Vec::new();
    let mut gap = None;
    let mut t = Some(due);
    while let Some(tick) = t {
        if tick > now {
            break;
        }
        ticks.push(tick);
        t = spec.next_after(tick);
        if ticks.len() == MAX_LISTED_TICKS
            && gap.is_none()
            && let (Some(n), [.., a, b]) = (t, ticks.as_slice())
        {
            // Jump to the last few periods before now: enough to find the latest tick.
            let back = now - (*b - *a) * 4;
            if n <= back {
                gap = Some(tick);
                t = spec.next_after(back.max(tick));
            }
        }
    }
    (ticks, gap, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_rows_and_catch_up_spacing_of_a_fire() {
        let (t1, t2, t3) = (
            utc("2026-03-01T10:00:00Z"),
            utc("2026-03-01T11:00:00Z"),
            utc("2026-03-01T12:00:00Z"),
        );
        let fire = Fire {
            fire_at: t3,
            coalesced: vec![t1, t2],
            catch_up: true,
            detail: Some("caught up".into()),
        };
        let paused = fire.paused_rows();
        assert_eq!(paused.iter().map(|r| r.0).collect::<Vec<_>>(), [t1, t2, t3]);
        let (skipped, missed) = fire.overlap_rows();
        assert_eq!(skipped[0], (t3, "the previous run was still active"));
        assert_eq!(missed.len(), 2);
        let (fired, coalesced) = fire.fired_rows();
        assert_eq!(fired[0], (t3, "caught up"));
        assert!(coalesced.iter().all(|r| r.1.contains("coalesced")));
        // Catch-ups are spread by the spacing; an on-time fire runs at its tick.
        let now = utc("2026-03-01T12:30:00Z");
        let spacing = Duration::seconds(5);
        let mut slot = None;
        assert_eq!(fire.run_at(&mut slot, spacing, now), now);
        assert_eq!(fire.run_at(&mut slot, spacing, now), now + spacing);
        let on_time = Fire {
            catch_up: false,
            ..fire
        };
        assert_eq!(on_time.run_at(&mut slot, spacing, now), t3);
        assert_eq!(on_time.fired_rows().0[0].0, t3);
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn cron(expr: &str, tz: &str) -> ScheduleSpec {
        ScheduleSpec::parse(Some(expr), None, Some(tz), utc("2026-01-01T00:00:00Z")).unwrap()
    }

    fn input(due: &str, now: &str, policy: MissedPolicy) -> PlanInput {
        PlanInput {
            due: utc(due),
            now: utc(now),
            policy,
            window: None,
            late_after: Duration::minutes(1),
        }
    }

    #[test]
    fn an_on_time_tick_fires_normally() {
        let s = cron("*/10 * * * *", "UTC");
        let p = plan(
            &s,
            input(
                "2026-11-01T12:00:00Z",
                "2026-11-01T12:00:00.400Z",
                MissedPolicy::Once,
            ),
        );
        assert_eq!(p.fires.len(), 1);
        assert!(!p.fires[0].catch_up);
        assert_eq!(p.fires[0].ticks(), 1);
        assert!(p.missed.is_empty());
        assert_eq!(p.next, Some(utc("2026-11-01T12:10:00Z")));
    }

    #[test]
    fn downtime_gives_one_catch_up_standing_for_every_missed_tick() {
        let s = cron("*/10 * * * *", "UTC");
        let p = plan(
            &s,
            input(
                "2026-11-01T12:00:00Z",
                "2026-11-01T17:05:00Z",
                MissedPolicy::Once,
            ),
        );
        assert_eq!(p.fires.len(), 1);
        let f = &p.fires[0];
        assert_eq!(f.fire_at, utc("2026-11-01T17:00:00Z"));
        assert_eq!(f.ticks(), 31);
        assert!(f.catch_up);
        assert_eq!(f.coalesced.first(), Some(&utc("2026-11-01T12:00:00Z")));
        assert!(p.missed.is_empty());
        assert_eq!(
            p.next,
            Some(utc("2026-11-01T17:10:00Z")),
            "stays on the grid"
        );
    }

    #[test]
    fn a_latest_tick_outside_the_window_runs_nothing() {
        let s = cron("0 * * * *", "UTC");
        let mut i = input(
            "2026-11-01T09:00:00Z",
            "2026-11-01T12:30:00Z",
            MissedPolicy::Once,
        );
        i.window = Some(Duration::minutes(10));
        let p = plan(&s, i);
        assert!(p.fires.is_empty());
        assert_eq!(p.missed.len(), 4);
        assert!(p.missed[0].1.contains("outside the catch-up window"));
        assert_eq!(p.next, Some(utc("2026-11-01T13:00:00Z")));
    }

    #[test]
    fn skip_runs_nothing_and_all_runs_each_tick_in_the_window() {
        let s = cron("*/10 * * * *", "UTC");
        let p = plan(
            &s,
            input(
                "2026-11-01T12:00:00Z",
                "2026-11-01T13:05:00Z",
                MissedPolicy::Skip,
            ),
        );
        assert!(p.fires.is_empty());
        assert_eq!(p.missed.len(), 7);
        assert!(p.missed[0].1.contains("policy is skip"));
        let mut i = input(
            "2026-11-01T12:00:00Z",
            "2026-11-01T13:05:00Z",
            MissedPolicy::All,
        );
        i.window = Some(Duration::minutes(30));
        let p = plan(&s, i);
        let fired: Vec<_> = p.fires.iter().map(|f| f.fire_at).collect();
        assert_eq!(
            fired,
            vec![
                utc("2026-11-01T12:40:00Z"),
                utc("2026-11-01T12:50:00Z"),
                utc("2026-11-01T13:00:00Z")
            ]
        );
        assert!(p.fires.iter().all(|f| f.ticks() == 1 && f.catch_up));
        assert_eq!(p.missed.len(), 4);
    }

    #[test]
    fn a_single_late_tick_follows_the_policy() {
        let s = cron("0 * * * *", "UTC");
        let p = plan(
            &s,
            input(
                "2026-11-01T12:00:00Z",
                "2026-11-01T12:20:00Z",
                MissedPolicy::Skip,
            ),
        );
        assert!(p.fires.is_empty() && p.missed.len() == 1);
        let p = plan(
            &s,
            input(
                "2026-11-01T12:00:00Z",
                "2026-11-01T12:20:00Z",
                MissedPolicy::Once,
            ),
        );
        assert!(p.fires[0].catch_up && p.fires[0].ticks() == 1);
    }

    #[test]
    fn one_shots_fire_once_and_are_exhausted() {
        let s = ScheduleSpec::Once(utc("2026-11-01T12:00:00Z"));
        let p = plan(
            &s,
            input(
                "2026-11-01T12:00:00Z",
                "2026-11-01T12:00:01Z",
                MissedPolicy::Once,
            ),
        );
        assert_eq!(p.fires.len(), 1);
        assert_eq!(p.next, None);
        // Days late: the default window of a one-shot is unlimited.
        let p = plan(
            &s,
            input(
                "2026-11-01T12:00:00Z",
                "2026-11-05T00:00:00Z",
                MissedPolicy::Once,
            ),
        );
        assert!(p.fires[0].catch_up);
    }

    #[test]
    fn a_long_outage_lists_a_bounded_number_of_ticks() {
        let s = cron("* * * * *", "UTC");
        let p = plan(
            &s,
            input(
                "2026-01-01T00:00:00Z",
                "2026-03-01T00:00:30Z",
                MissedPolicy::Once,
            ),
        );
        assert_eq!(p.fires.len(), 1);
        let f = &p.fires[0];
        assert_eq!(f.fire_at, utc("2026-03-01T00:00:00Z"));
        assert!(f.ticks() <= MAX_LISTED_TICKS as i64 + 10, "{}", f.ticks());
        assert!(f.detail.as_deref().unwrap().contains("more ticks"));
        assert_eq!(p.next, Some(utc("2026-03-01T00:01:00Z")));
    }

    #[test]
    fn catch_up_ticks_follow_dst_in_the_zone() {
        // Hourly in Chicago across the fall-back: 01:00 local happens twice.
        let s = cron("0 * * * *", "America/Chicago");
        let p = plan(
            &s,
            input(
                "2026-11-01T05:00:00Z",
                "2026-11-01T08:30:00Z",
                MissedPolicy::Once,
            ),
        );
        assert_eq!(p.fires[0].ticks(), 4);
        assert_eq!(p.next, Some(utc("2026-11-01T09:00:00Z")));
    }
}
