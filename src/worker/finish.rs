//! Deciding how an attempt ends (pure): state, errors, retry time, result and inbox message.

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::config::RunDefaults;
use crate::config::retry::{FailureKind, RetryPolicy};
use crate::inbox::{FinalKind, final_message, summary_of};
use crate::run::ending::{blank, end_unsuccessfully};
use crate::run::{Fence, FinishRecord, Outcome};
use crate::run::{Jitter, Run, backoff};
use crate::tool::sink::SinkSnapshot;
use crate::tool::{INTERNAL_ERROR_TEXT, ToolOutcome, ToolSuccess};

/// How an attempt ended, as the worker saw it.
#[derive(Debug, Clone)]
pub enum AttemptEnd {
    /// The tool returned.
    Returned(ToolOutcome),
    /// It ran past its timeout.
    TimedOut(std::time::Duration),
    /// An operator cancelled it.
    Cancelled,
    /// It panicked.
    Panicked(String),
    /// Its worker was lost (process died, or the lease expired): (visible reason, ops detail).
    WorkerLost(String, String),
    /// The tool waits (a durable sleep, an event wait, an async tool's next check): the run
    /// is suspended, with the steps to record with it.
    Suspended(crate::tool::durable::SuspendRequest),
}

/// Turns an attempt's end into the records to write. `policy` is the run's tool's retry
/// policy (its backoff, and which failures retry; the run's own `max_attempts` counts);
/// `jitter` is the random draw for backoff.
pub fn decide(
    run: &Run,
    end: AttemptEnd,
    snap: SinkSnapshot,
    defaults: &RunDefaults,
    policy: &RetryPolicy,
    now: DateTime<Utc>,
    jitter: Jitter,
) -> FinishRecord {
    let token = run.lease_token.clone().unwrap_or_default();
    let mut rec = blank(run, Fence::Lease(token));
    rec.status_text = snap.status_text;
    rec.progress = snap.progress;
    rec.output_tail = snap.output_tail;
    rec.log = snap.log;
    let verdict = match end {
        AttemptEnd::Returned(ToolOutcome::Snooze(d)) => match snooze(run, d, defaults, now) {
            Ok(s) => Verdict::Suspended(s),
            // Never retried, whatever the policy: the next attempt starts with the same count
            // of snoozes and would end the same way at its first.
            Err(limit) => failure(limit, None, None, FinalKind::Failed),
        },
        end => classify(end),
    };
    match verdict {
        Verdict::Succeeded(s) => succeeded(rec, run, s),
        Verdict::Failed(f) => failed(rec, run, f, policy, now, jitter),
        Verdict::Suspended(req) => {
            rec.outcome = Outcome::Suspend(req.suspension);
            rec.steps = req.steps;
            rec
        }
    }
}

/// A snooze for `d`, or the error that ends the run once it has snoozed `runs.max_snoozes`
/// times.
fn snooze(
    run: &Run,
    d: std::time::Duration,
    defaults: &RunDefaults,
    now: DateTime<Utc>,
) -> Result<crate::tool::durable::SuspendRequest, String> {
    if run.snoozes >= defaults.max_snoozes {
        return Err(format!(
            "the run snoozed {} times, the limit (runs.max_snoozes is {})",
            run.snoozes, defaults.max_snoozes
        ));
    }
    let d = chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
    Ok(crate::tool::durable::SuspendRequest {
        suspension: crate::run::Suspension {
            kind: crate::run::WaitKind::Snooze,
            event: None,
            until: crate::clock::saturating_add(now, d).min(crate::run::steps::far_future()),
        },
        steps: Vec::new(),
    })
}

/// An attempt's end sorted into a success and the kinds of failure.
enum Verdict {
    Succeeded(ToolSuccess),
    Failed(Failure),
    Suspended(crate::tool::durable::SuspendRequest),
}

/// What went wrong in an attempt.
struct Failure {
    /// The error the session sees.
    error: String,
    /// The ops-only detail.
    internal: Option<String>,
    /// The kind of failure a retry policy may retry; `None`: never retried.
    kind_of: Option<FailureKind>,
    /// The run's final state when no attempt is left.
    kind: FinalKind,
}

/// A failure verdict.
fn failure(
    error: String,
    internal: Option<String>,
    kind_of: Option<FailureKind>,
    kind: FinalKind,
) -> Verdict {
    Verdict::Failed(Failure {
        error,
        internal,
        kind_of,
        kind,
    })
}

/// Sorts an end: a success, or a failure with its texts and the kind of failure it is (which
/// the retry policy's `retry_on` is asked about).
fn classify(end: AttemptEnd) -> Verdict {
    match end {
        AttemptEnd::Returned(ToolOutcome::Success(s)) => Verdict::Succeeded(s),
        AttemptEnd::Suspended(req) => Verdict::Suspended(req),
        // Turned into a suspension (or the limit's error) by `decide` before this.
        AttemptEnd::Returned(ToolOutcome::Snooze(d)) => failure(
            format!(
                "snooze for {} was not recorded",
                crate::clock::format_duration(d)
            ),
            None,
            Some(FailureKind::InternalError),
            FinalKind::Failed,
        ),
        AttemptEnd::Returned(ToolOutcome::ToolError(m)) => {
            failure(m, None, Some(FailureKind::ToolError), FinalKind::Failed)
        }
        AttemptEnd::Returned(ToolOutcome::Internal(detail)) => failure(
            INTERNAL_ERROR_TEXT.to_string(),
            Some(detail),
            Some(FailureKind::InternalError),
            FinalKind::Failed,
        ),
        // The seed fails a background run whose tool needs a connection (an inline call
        // returns it as a non-error instead): nobody is there to set the connection up, and
        // retrying cannot help until someone does.
        AttemptEnd::Returned(ToolOutcome::ConnectionRequired { provider }) => failure(
            format!("Background tool requires connection setup: {provider}"),
            None,
            None,
            FinalKind::Failed,
        ),
        AttemptEnd::Panicked(msg) => failure(
            INTERNAL_ERROR_TEXT.to_string(),
            Some(format!("tool panicked: {msg}")),
            Some(FailureKind::InternalError),
            FinalKind::Failed,
        ),
        AttemptEnd::TimedOut(limit) => {
            let text = format!("timed out after {}", crate::clock::format_duration(limit));
            failure(
                text.clone(),
                Some(text),
                Some(FailureKind::Timeout),
                FinalKind::Failed,
            )
        }
        AttemptEnd::WorkerLost(reason, detail) => failure(
            format!("worker lost: {reason}"),
            Some(detail),
            Some(FailureKind::WorkerLost),
            FinalKind::Failed,
        ),
        AttemptEnd::Cancelled => failure(
            "cancelled by request while running".to_string(),
            None,
            None,
            FinalKind::Cancelled,
        ),
    }
}

/// A success: the result (with its images), a raw output sidecar, and the completion message.
fn succeeded(mut rec: FinishRecord, run: &Run, s: ToolSuccess) -> FinishRecord {
    let mut result = json!({"status": "completed", "result": s.value});
    if !s.images.is_empty() {
        // toolq's field names only: the seed's pair would store the data twice.
        result["images"] = s.images.iter().map(crate::tool::Image::stored).collect();
    }
    if let Some(raw) = s.raw_output {
        rec.extra_blobs.push((
            format!("/.background/{}/raw_output.txt", run.id),
            raw.into_bytes(),
        ));
    }
    rec.result = Some(result.to_string().into_bytes());
    // A successful spawn_background run is an acknowledgement: the run (or monitor) it
    // started signals the session itself, so one background run is one message.
    if run.signal_on_completion && run.tool != crate::tool::builtin::spawn_background::NAME {
        rec.message = Some(final_message(
            FinalKind::Completed,
            &run.about(),
            &summary_of(&result["result"]),
        ));
    }
    rec
}

/// A failure: its error entry, then a retry after the policy's backoff while the policy
/// retries its kind and the run's attempts remain, else the unsuccessful final state.
fn failed(
    mut rec: FinishRecord,
    run: &Run,
    f: Failure,
    policy: &RetryPolicy,
    now: DateTime<Utc>,
    jitter: Jitter,
) -> FinishRecord {
    rec.error_entry = Some(json!({
        "attempt": run.attempt,
        "at": crate::clock::ts(now),
        "error": f.error,
        "internal_error": f.internal,
    }));
    rec.error = Some(f.error.clone());
    rec.internal_error = f.internal;
    if policy.retries(f.kind_of, run.attempt, run.max_attempts) {
        let delay = backoff(
            run.attempt,
            chrono::Duration::from_std(policy.backoff_base).unwrap_or(chrono::Duration::seconds(1)),
            chrono::Duration::from_std(policy.backoff_max).unwrap_or(chrono::Duration::minutes(10)),
            jitter,
        );
        rec.outcome = Outcome::Retry(crate::clock::saturating_add(now, delay));
        return rec;
    }
    end_unsuccessfully(rec, run, f.kind, &f.error, run.attempt)
}

pub use crate::run::ending::{WaitingEnd, decide_waiting};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::run::RunState;
    use crate::tool::Image;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, 12, 0, 10).unwrap()
    }

    fn go(r: &Run, end: AttemptEnd) -> FinishRecord {
        decide(
            r,
            end,
            SinkSnapshot::default(),
            &Config::default().runs,
            &RetryPolicy::of_runs(&Config::default().runs),
            now(),
            0.5,
        )
    }

    #[test]
    fn success_writes_result_and_message_and_keeps_raw_output_aside() {
        let r = crate::run::running_fixture(1, 3);
        let rec = go(
            &r,
            AttemptEnd::Returned(ToolOutcome::Success(ToolSuccess {
                value: json!({"ok": true}),
                images: vec![Image {
                    mime_type: "image/png".into(),
                    data: "AAAA".into(),
                }],
                raw_output: Some("SECRET RAW".into()),
            })),
        );
        assert_eq!(rec.outcome, Outcome::Final(RunState::Completed));
        let result = String::from_utf8(rec.result.unwrap()).unwrap();
        assert!(result.contains("\"ok\":true") && result.contains("image/png"));
        assert!(!result.contains("SECRET RAW"));
        assert_eq!(rec.extra_blobs.len(), 1);
        assert!(rec.extra_blobs[0].0.ends_with("/raw_output.txt"));
        let msg = rec.message.unwrap();
        assert_eq!(msg.kind, "completed");
        assert!(!msg.body.contains("SECRET RAW"));
    }

    #[test]
    fn tool_errors_fail_at_once() {
        let rec = go(
            &crate::run::running_fixture(1, 3),
            AttemptEnd::Returned(ToolOutcome::tool_error("bad input")),
        );
        assert_eq!(rec.outcome, Outcome::Final(RunState::Failed));
        assert_eq!(rec.error.as_deref(), Some("bad input"));
        assert_eq!(rec.message.unwrap().kind, "failed");
    }

    #[test]
    fn internal_errors_retry_with_backoff_then_fail_hidden() {
        let rec = go(
            &crate::run::running_fixture(1, 3),
            AttemptEnd::Returned(ToolOutcome::Internal("pg: password".into())),
        );
        assert_eq!(
            rec.outcome,
            Outcome::Retry(now() + chrono::Duration::seconds(1))
        );
        assert!(rec.message.is_none() && rec.result.is_none());
        let rec = go(
            &crate::run::running_fixture(2, 3),
            AttemptEnd::Returned(ToolOutcome::Internal("pg: password".into())),
        );
        assert_eq!(
            rec.outcome,
            Outcome::Retry(now() + chrono::Duration::seconds(2))
        );
        let rec = go(
            &crate::run::running_fixture(3, 3),
            AttemptEnd::Returned(ToolOutcome::Internal("pg: password".into())),
        );
        assert_eq!(rec.outcome, Outcome::Final(RunState::Failed));
        assert_eq!(rec.error.as_deref(), Some(INTERNAL_ERROR_TEXT));
        assert_eq!(rec.internal_error.as_deref(), Some("pg: password"));
        let msg = rec.message.unwrap();
        assert!(!msg.body.contains("password") && !msg.data.to_string().contains("password"));
        assert!(
            !String::from_utf8(rec.result.unwrap())
                .unwrap()
                .contains("password")
        );
        assert_eq!(rec.error_entry.unwrap()["attempt"], 3);
    }

    #[test]
    fn timeouts_name_the_limit_and_panics_are_internal() {
        let rec = go(
            &crate::run::running_fixture(3, 3),
            AttemptEnd::TimedOut(std::time::Duration::from_secs(30)),
        );
        assert_eq!(rec.error.as_deref(), Some("timed out after 30s"));
        assert_eq!(rec.outcome, Outcome::Final(RunState::Failed));
        let rec = go(
            &crate::run::running_fixture(1, 1),
            AttemptEnd::Panicked("index out of bounds".into()),
        );
        assert_eq!(rec.error.as_deref(), Some(INTERNAL_ERROR_TEXT));
        assert!(rec.internal_error.unwrap().contains("index out of bounds"));
    }

    #[test]
    fn cancellation_does_not_retry_and_connection_required_fails_the_run() {
        let rec = go(&crate::run::running_fixture(1, 3), AttemptEnd::Cancelled);
        assert_eq!(rec.outcome, Outcome::Final(RunState::Cancelled));
        assert_eq!(rec.message.unwrap().kind, "cancelled");
        // The seed's background path: failed at once (not retried), with its text.
        let rec = go(
            &crate::run::running_fixture(1, 3),
            AttemptEnd::Returned(ToolOutcome::ConnectionRequired {
                provider: "github".into(),
            }),
        );
        let text = "Background tool requires connection setup: github";
        assert_eq!(rec.outcome, Outcome::Final(RunState::Failed));
        assert_eq!(rec.error.as_deref(), Some(text));
        let result: serde_json::Value = serde_json::from_slice(&rec.result.unwrap()).unwrap();
        assert_eq!(result, json!({"status": "failed", "error": text}));
        let m = rec.message.unwrap();
        assert_eq!(m.kind, "failed");
        assert!(m.body.contains(text), "{}", m.body);
    }

    #[test]
    fn no_signal_means_no_message() {
        let mut r = crate::run::running_fixture(1, 3);
        r.signal_on_completion = false;
        assert!(
            go(&r, AttemptEnd::Returned(ToolOutcome::ok(json!(1))))
                .message
                .is_none()
        );
        assert!(
            go(&r, AttemptEnd::Returned(ToolOutcome::tool_error("x")))
                .message
                .is_none()
        );
    }

    #[test]
    fn the_policy_decides_which_failures_retry_and_how_long_they_wait() {
        use crate::config::retry::RetryOn;
        let d = Config::default().runs;
        let with = |kinds: &[FailureKind]| RetryPolicy {
            backoff_base: std::time::Duration::from_secs(10),
            backoff_max: std::time::Duration::from_secs(15),
            retry_on: RetryOn::of(kinds),
            ..RetryPolicy::of_runs(&d)
        };
        let decide_with = |p: &RetryPolicy, attempt: i64, end: AttemptEnd| {
            decide(
                &crate::run::running_fixture(attempt, 3),
                end,
                SinkSnapshot::default(),
                &d,
                p,
                now(),
                0.5,
            )
            .outcome
        };
        let ends = [
            (
                FailureKind::ToolError,
                AttemptEnd::Returned(ToolOutcome::tool_error("no")),
            ),
            (
                FailureKind::InternalError,
                AttemptEnd::Returned(ToolOutcome::Internal("x".into())),
            ),
            (FailureKind::InternalError, AttemptEnd::Panicked("p".into())),
            (
                FailureKind::Timeout,
                AttemptEnd::TimedOut(std::time::Duration::from_secs(1)),
            ),
            (
                FailureKind::WorkerLost,
                AttemptEnd::WorkerLost("gone".into(), "d".into()),
            ),
        ];
        for (kind, end) in ends {
            let only = with(&[kind]);
            // Its own kind retries after the policy's backoff (10s, then capped at 15s)...
            assert_eq!(
                decide_with(&only, 1, end.clone()),
                Outcome::Retry(now() + chrono::Duration::seconds(10)),
                "{kind}"
            );
            assert_eq!(
                decide_with(&only, 2, end.clone()),
                Outcome::Retry(now() + chrono::Duration::seconds(15)),
                "{kind}"
            );
            // ...until the run's own attempts are spent; a policy without it fails at once.
            assert_eq!(
                decide_with(&only, 3, end.clone()),
                Outcome::Final(RunState::Failed)
            );
            let others: Vec<FailureKind> = FailureKind::ALL
                .into_iter()
                .filter(|k| *k != kind)
                .collect();
            assert_eq!(
                decide_with(&with(&others), 1, end),
                Outcome::Final(RunState::Failed),
                "{kind}"
            );
        }
        // Cancellation and a missing connection never retry, whatever the policy says.
        let all = with(&FailureKind::ALL);
        assert_eq!(
            decide_with(&all, 1, AttemptEnd::Cancelled),
            Outcome::Final(RunState::Cancelled)
        );
        let conn = AttemptEnd::Returned(ToolOutcome::ConnectionRequired {
            provider: "github".into(),
        });
        assert_eq!(decide_with(&all, 1, conn), Outcome::Final(RunState::Failed));
    }

    #[test]
    fn a_run_past_its_snooze_limit_fails_even_when_tool_errors_retry() {
        let d = Config::default().runs;
        let mut run = crate::run::running_fixture(1, 3);
        run.snoozes = d.max_snoozes;
        let policy = RetryPolicy {
            retry_on: crate::config::retry::RetryOn::of(&FailureKind::ALL),
            ..RetryPolicy::of_runs(&d)
        };
        let rec = decide(
            &run,
            AttemptEnd::Returned(ToolOutcome::Snooze(std::time::Duration::from_secs(1))),
            SinkSnapshot::default(),
            &d,
            &policy,
            now(),
            0.5,
        );
        assert_eq!(rec.outcome, Outcome::Final(RunState::Failed));
        assert!(rec.error.unwrap().contains("runs.max_snoozes"));
    }
}
