//! Rescue tick: takes back the running runs of workers that are provably dead (same host and
//! boot, pid gone or reused) within one poll interval, and those whose lease expired (owner on
//! another host, or hung). Each rescued run is re-queued with backoff while attempts remain,
//! otherwise failed with "worker lost", its result blob and its inbox message. Every write is
//! fenced by (run, attempt, lease token), so a late finish of the lost attempt and the rescue
//! can never both apply.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::finish::{AttemptEnd, decide};
use super::identity;
use crate::config::RunDefaults;
use crate::config::retry::RetryPolicy;
use crate::core::Core;
use crate::error::Result;
use crate::run::{FinishRecord, Outcome};
use crate::run::{Jitter, Run};
use crate::store::{DecideRescue, Rescue, RescueReason};
use crate::tool::sink::SinkSnapshot;

/// What one rescue tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RescueReport {
    /// Worker rows marked stopped because their process is gone.
    pub workers_died: usize,
    /// Runs put back in the queue for another attempt.
    pub requeued: usize,
    /// Runs failed because no attempt was left.
    pub failed: usize,
    /// Runs whose cancellation had been requested, recorded as cancelled.
    pub cancelled: usize,
}

impl RescueReport {
    /// Runs taken back in all.
    pub fn rescued(&self) -> usize {
        self.requeued + self.failed + self.cancelled
    }
}

/// The visible reason for each rescue cause.
fn reason_text(reason: RescueReason) -> &'static str {
    match reason {
        RescueReason::OwnerDied => "the worker process running it died",
        RescueReason::OwnerStopped => "the worker running it stopped without finishing it",
        RescueReason::OwnerMissing => "the worker running it is not registered",
        RescueReason::LeaseExpired => "its lease expired without a heartbeat",
    }
}

/// Decides how a rescued run's attempt ends (pure): a requested cancellation is honoured,
/// otherwise the attempt counts as a "worker lost" failure, retried as `policy` (the tool's
/// retry policy) says.
pub fn decide_rescue(
    run: &Run,
    reason: RescueReason,
    defaults: &RunDefaults,
    policy: &RetryPolicy,
    now: DateTime<Utc>,
    jitter: Jitter,
) -> FinishRecord {
    let end = if run.cancel_requested_at.is_some() {
        AttemptEnd::Cancelled
    } else {
        let detail = format!(
            "{} ({}): owner {}, attempt {} of {}, lease until {}",
            reason.as_str(),
            reason_text(reason),
            run.lease_owner.as_deref().unwrap_or("none"),
            run.attempt,
            run.max_attempts,
            run.lease_expires_at
                .map(crate::clock::ts)
                .unwrap_or_else(|| "unset".into()),
        );
        AttemptEnd::WorkerLost(reason_text(reason).to_string(), detail)
    };
    decide(
        run,
        end,
        SinkSnapshot::default(),
        defaults,
        policy,
        now,
        jitter,
    )
}

/// One rescue pass over the database, as an operator tool (or a test) runs it: it spares
/// nothing and judges every lease. It looks first with a read; only when there is something to
/// take back does it open a write transaction, which looks again before acting (every write in
/// it is fenced anyway).
pub async fn rescue_tick(core: &Core) -> Result<RescueReport> {
    rescue_pass(core, Vec::new(), true).await
}

/// A rescue pass that spares the runs in `spare` (the rescuing worker's own) and takes runs
/// back for an expired lease only when `lease_expiry` holds.
async fn rescue_pass(core: &Core, spare: Vec<String>, lease_expiry: bool) -> Result<RescueReport> {
    let now = core.now();
    let params = Rescue {
        host: identity::host_of(&core.config().worker),
        boot_id: identity::boot_id(),
        pid_namespace: identity::pid_namespace(),
        now,
        is_dead: identity::is_dead,
        spare,
        lease_expiry,
    };
    let defaults = core.config().runs.clone();
    let finisher = core.clone();
    let decide: DecideRescue = Arc::new(move |run, reason| {
        let policy = finisher.config().retry_policy(&run.tool);
        let record = decide_rescue(run, reason, &defaults, &policy, now, rand::random::<f64>());
        finisher.finish_record(&run.tool, record)
    });
    let rescued = core.engine().attempt_rescue(params, decide).await?;
    let mut report = RescueReport {
        workers_died: rescued.workers_died,
        ..RescueReport::default()
    };
    // Logged after the commit: a line never claims a write that rolled back.
    for r in &rescued.runs {
        tracing::warn!(run_id = %r.run.id, attempt = r.run.attempt, reason = r.reason.as_str(),
            owner = r.run.lease_owner.as_deref().unwrap_or("none"), "rescued a run");
        match r.outcome {
            Outcome::Retry(_) => report.requeued += 1,
            Outcome::Final(crate::RunState::Cancelled) => report.cancelled += 1,
            _ => report.failed += 1,
        }
    }
    if report.requeued > 0 {
        core.wake_workers();
    }
    Ok(report)
}

/// Runs a rescue pass and logs (rather than returns) a failure: the next tick tries again.
pub(super) async fn rescue_once(sh: &Arc<Shared>) {
    // Its own runs, ended or not, stay this worker's: it extends their leases and records
    // their ends itself, also when the database comes back from an outage.
    let spare: Vec<String> = sh.flights().keys().map(|id| id.to_string()).collect();
    let lease = sh.core.config().worker.lease;
    let lease_expiry = sh.health().judges_leases(sh.core.now(), lease);
    match rescue_pass(&sh.core, spare, lease_expiry).await {
        Ok(r) if r.rescued() > 0 || r.workers_died > 0 => {
            sh.progressed();
            tracing::info!(
                workers_died = r.workers_died,
                requeued = r.requeued,
                failed = r.failed,
                cancelled = r.cancelled,
                "rescue pass"
            );
        }
        Ok(_) => {}
        Err(e) => sh.store_failed("rescue pass", e),
    }
}

/// Every poll interval: one rescue pass.
pub(super) async fn rescue_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let every = sh.core.config().worker.poll_interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        rescue_once(&sh).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::run::RunState;
    use serde_json::{Value, json};

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("literal instant")
            .with_timezone(&Utc)
    }

    #[test]
    fn lost_attempt_with_attempts_left_is_requeued_with_backoff() {
        let d = Config::default().runs;
        let now = at("2026-11-01T12:00:01Z");
        let rec = decide_rescue(
            &crate::run::running_fixture(1, 3),
            RescueReason::OwnerDied,
            &d,
            &RetryPolicy::of_runs(&d),
            now,
            0.5,
        );
        // base 1s, attempt 1, jitter 0.5 -> exactly 1s.
        assert_eq!(rec.outcome, Outcome::Retry(at("2026-11-01T12:00:02Z")));
        assert_eq!(
            rec.error.as_deref(),
            Some("worker lost: the worker process running it died")
        );
        let entry = rec.error_entry.expect("errors entry");
        assert_eq!(entry["attempt"], 1);
        assert!(entry["error"].as_str().unwrap().starts_with("worker lost"));
        assert!(
            entry["internal_error"]
                .as_str()
                .unwrap()
                .contains("wk_dead")
        );
        assert!(rec.message.is_none() && rec.result.is_none());
        assert_eq!(
            (rec.attempt, &rec.fence),
            (1, &crate::run::Fence::Lease("tok".into()))
        );
    }

    #[test]
    fn lost_last_attempt_fails_with_result_and_message() {
        let d = Config::default().runs;
        let now = at("2026-11-01T12:01:00Z");
        let rec = decide_rescue(
            &crate::run::running_fixture(3, 3),
            RescueReason::LeaseExpired,
            &d,
            &RetryPolicy::of_runs(&d),
            now,
            0.1,
        );
        assert_eq!(rec.outcome, Outcome::Final(RunState::Failed));
        let err = "worker lost: its lease expired without a heartbeat";
        assert_eq!(rec.error.as_deref(), Some(err));
        let result: Value = serde_json::from_slice(&rec.result.expect("result")).unwrap();
        assert_eq!(result, json!({"status": "failed", "error": err}));
        let msg = rec.message.expect("inbox message");
        assert_eq!((msg.kind, msg.attempt), ("failed", 3));
        assert!(
            msg.body.starts_with("Background run failed."),
            "{}",
            msg.body
        );
        assert!(msg.body.contains(err));
    }

    #[test]
    fn cancel_requested_before_the_loss_ends_cancelled() {
        let d = Config::default().runs;
        let mut run = crate::run::running_fixture(1, 3);
        run.cancel_requested_at = Some(at("2026-11-01T12:00:05Z"));
        let rec = decide_rescue(
            &run,
            RescueReason::OwnerDied,
            &d,
            &RetryPolicy::of_runs(&d),
            at("2026-11-01T12:00:06Z"),
            0.5,
        );
        assert_eq!(rec.outcome, Outcome::Final(RunState::Cancelled));
        assert_eq!(rec.message.expect("message").kind, "cancelled");
    }

    #[test]
    fn a_silent_run_gets_no_message() {
        let d = Config::default().runs;
        let mut run = crate::run::running_fixture(1, 1);
        run.signal_on_completion = false;
        let rec = decide_rescue(
            &run,
            RescueReason::OwnerMissing,
            &d,
            &RetryPolicy::of_runs(&d),
            at("2026-11-01T12:00:06Z"),
            0.5,
        );
        assert_eq!(rec.outcome, Outcome::Final(RunState::Failed));
        assert!(rec.message.is_none() && rec.result.is_some());
    }

    #[test]
    fn a_policy_without_worker_lost_fails_the_lost_attempt_and_its_backoff_counts() {
        let d = Config::default().runs;
        let now = at("2026-11-01T12:00:00Z");
        let run = crate::run::running_fixture(1, 3);
        let mut policy = RetryPolicy::of_runs(&d);
        policy.retry_on =
            crate::config::retry::RetryOn::of(&[crate::config::retry::FailureKind::Timeout]);
        let rec = decide_rescue(&run, RescueReason::OwnerDied, &d, &policy, now, 0.5);
        assert_eq!(rec.outcome, Outcome::Final(RunState::Failed));
        policy.retry_on = crate::config::retry::RetryOn::DEFAULT;
        policy.backoff_base = std::time::Duration::from_secs(30);
        let rec = decide_rescue(&run, RescueReason::OwnerDied, &d, &policy, now, 0.5);
        assert_eq!(rec.outcome, Outcome::Retry(at("2026-11-01T12:00:30Z")));
    }
}
