//! The finisher: records attempt ends in batches through the engine's end-writer, and
//! claims replacements for the freed slots in the same transaction.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::attempt::start;
use super::claim::{ClaimArgs, claimed};
use super::shared::{InFlight, Job, Shared};
use crate::error::{Fault, StoreError};
use crate::run::Run;
use crate::store;

/// Scheduler turns the finisher waits for more attempt ends before it commits a batch.
const GATHER_TURNS: u32 = 3;

/// Records attempt ends in batches: everything that arrived while the previous batch was
/// being written goes into the next transaction. The same transaction claims replacements for
/// the slots the batch frees (one commit per cycle instead of two), unless claiming stopped.
pub(super) async fn finisher_loop(
    sh: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Job>,
    jobs: mpsc::WeakUnboundedSender<Job>,
    claiming: CancellationToken,
    shutdown: CancellationToken,
) {
    let concurrency = sh.core.config().worker.concurrency;
    while let Some(first) = rx.recv().await {
        let batch = Arc::new(gather(&sh, &mut rx, first).await);
        let mut cursor = sh.gate.lock().await;
        // The batch's runs are still in `flights`; their slots are free once it commits.
        // Step records free no slot: only ends and hand-backs do.
        let leaving = batch.iter().filter(|j| !matches!(j, Job::Step(_))).count();
        let free = if claiming.is_cancelled() {
            0
        } else {
            concurrency.saturating_sub(sh.flights().len().saturating_sub(leaving))
        };
        let args = ClaimArgs::new(&sh, free, cursor.clone());
        let started = std::time::Instant::now();
        let written = write_batch(&sh, &batch, &args, &claiming, &shutdown).await;
        // Taken while the batch still holds slots, so the claim loop's sender is still alive
        // (it is dropped only once nothing is in flight).
        let sender = jobs.upgrade();
        book(&sh, &batch, &written, started.elapsed());
        if !written.runs.is_empty() {
            start_replacements(&sh, written, started, &mut cursor, sender.as_ref());
        }
        drop(sender);
        drop(cursor);
        sh.slot_freed.notify_one();
    }
}

/// The batch that starts with `first`. Runs started together tend to end together: the
/// others get a few scheduler turns to join this commit, while they keep arriving, instead
/// of one commit each.
async fn gather(sh: &Shared, rx: &mut mpsc::UnboundedReceiver<Job>, first: Job) -> Vec<Job> {
    let mut batch = vec![first];
    let mut turns = 0;
    while batch.len() < 512 {
        match rx.try_recv() {
            Ok(j) => {
                batch.push(j);
                turns = 0;
            }
            Err(_) if turns < GATHER_TURNS && batch.len() < sh.flights().len() => {
                turns += 1;
                tokio::task::yield_now().await;
            }
            Err(_) => break,
        }
    }
    batch
}

/// What writing one batch came to.
struct Written {
    /// Per settlement: whether its fenced write applied.
    applied: Vec<bool>,
    /// The replacements claimed in the same transaction.
    runs: Vec<Run>,
    /// The time the (last) write was made at.
    now: DateTime<Utc>,
    /// The batch could not be written: its leases will expire and the runs be rescued.
    gave_up: bool,
}

/// Writes the batch (its ends, hand-backs and replacement claim, one transaction), retrying
/// as [`retry_after`] decides.
async fn write_batch(
    sh: &Shared,
    batch: &Arc<Vec<Job>>,
    args: &ClaimArgs,
    claiming: &CancellationToken,
    shutdown: &CancellationToken,
) -> Written {
    let mut delay = Duration::from_millis(50);
    loop {
        let now = sh.core.now();
        let res = sh
            .core
            .engine()
            .attempt_settle(store::Settle {
                batch: batch.clone(),
                claim: args.params(now),
            })
            .await;
        let e = match res {
            Ok(s) => {
                sh.progressed();
                return Written {
                    applied: s.applied,
                    runs: s.claimed,
                    now,
                    gave_up: false,
                };
            }
            Err(e) => e,
        };
        let what = format!("recording {} attempt ends", batch.len());
        if !retry_after(sh, e, &what, delay, claiming, shutdown).await {
            return Written {
                applied: vec![false; batch.len()],
                runs: Vec::new(),
                now,
                gave_up: true,
            };
        }
        delay = delay.saturating_mul(2);
    }
}

/// Handles a failed write of `what` after waiting `delay`: reports it, and either backs off
/// (then true: try again) or gives up (false).
async fn retry_after(
    sh: &Shared,
    e: StoreError,
    what: &str,
    delay: Duration,
    claiming: &CancellationToken,
    shutdown: &CancellationToken,
) -> bool {
    let fault = e.fault();
    if fault == Fault::Storage {
        sh.store_failed(what, e.into());
        // This loop holds the gate the claim loop waits on: it watches the stall too.
        if sh.opts.drain {
            sh.check_stall();
        }
        let stopping = claiming.is_cancelled() || shutdown.is_cancelled();
        // A storage error outlasts any fixed number of retries: keep the batch (its
        // leases stay heartbeated) until writes work again or the worker stops.
        if sh.halt.is_cancelled() || (stopping && delay >= Duration::from_secs(10)) {
            tracing::error!("gave up {what}; their leases will expire and the runs be rescued");
            return false;
        }
    } else {
        let keep_trying =
            !sh.halt.is_cancelled() && fault == Fault::Other && delay < Duration::from_secs(10);
        if !keep_trying {
            if fault == Fault::Damaged {
                sh.store_failed(what, e.into());
            } else {
                tracing::error!(error = %e,
                    "gave up {what}; their leases will expire and the runs be rescued");
            }
            return false;
        }
        sh.store_failed(what, e.into());
    }
    tokio::select! {
        _ = tokio::time::sleep(delay.min(Duration::from_secs(10))) => {}
        _ = sh.halt.cancelled() => {}
    }
    true
}

/// Books a written batch: frees its slots, and counts, logs and traces each end (`took`: how
/// long its write took, the end span's length).
fn book(sh: &Shared, batch: &[Job], written: &Written, took: Duration) {
    let mut flights = sh.flights();
    for (job, &ok) in batch.iter().zip(&written.applied) {
        if let Job::Step(save) = job {
            // The attempt goes on: its tool learns whether its record committed.
            sh.step_recorded(save, ok && !written.gave_up);
            continue;
        }
        let flight = flights.remove(job.id());
        if written.gave_up {
            // Not recorded, and not fenced out either: logged once when it gave up.
            continue;
        }
        sh.metrics.finished(outcome_label(job, ok));
        if ok {
            log_end(job, flight.as_ref(), written.now);
            trace_end(job, flight.as_ref(), took);
        }
        match (job, ok) {
            (Job::End(_), true) => sh.recorded.fetch_add(1, Ordering::Relaxed),
            (Job::Release(_), true) => sh.handed_back.fetch_add(1, Ordering::Relaxed),
            (Job::Step(_), true) => 0,
            (_, false) => {
                tracing::warn!(
                    run_id = job.id().as_str(),
                    "lease lost before the end was recorded; dropped (the run was rescued or cancelled)"
                );
                sh.fenced_out.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// Starts the replacements the batch's transaction claimed (`started`: when the claim
/// began), and moves the session cursor past them.
fn start_replacements(
    sh: &Arc<Shared>,
    written: Written,
    started: std::time::Instant,
    cursor: &mut Option<String>,
    sender: Option<&mpsc::UnboundedSender<Job>>,
) {
    let runs = written.runs;
    claimed(sh, &runs, written.now, started.elapsed());
    if let Some(last) = runs.last() {
        *cursor = Some(last.session_id.clone());
    }
    match sender {
        Some(tx) => {
            for run in runs {
                start(sh, run, tx.clone());
            }
        }
        None => tracing::error!(
            "claimed {} runs after the worker stopped; their leases will expire and they be rescued",
            runs.len()
        ),
    }
}

/// Sends the `toolq.end` span of a recorded end, under the attempt's trace.
fn trace_end(job: &Job, flight: Option<&InFlight>, took: Duration) {
    use crate::trace::{Parent, Span, names};
    let (Job::End(r), Some(f)) = (job, flight) else {
        return;
    };
    let span = Span::start(names::END, Parent::Span(&f.trace), Some(took), || {
        let mut attrs = super::attempt::run_attributes(&f.run);
        attrs.push(opentelemetry::KeyValue::new(
            "outcome",
            super::attempt::outcome_name(&r.outcome),
        ));
        attrs
    });
    span.end();
}

/// The `outcome` label of an attempt end in metrics.
fn outcome_label(job: &Job, applied: bool) -> &'static str {
    match (job, applied) {
        (_, false) => "fenced_out",
        (Job::Release(_), true) => "handed_back",
        (Job::Step(_), true) => "step",
        (Job::End(r), true) => match &r.outcome {
            crate::run::Outcome::Final(s) => s.as_str(),
            crate::run::Outcome::Retry(_) => "retried",
            crate::run::Outcome::AwaitApproval { .. } => "awaiting_approval",
            crate::run::Outcome::Suspend(_) => "suspended",
        },
    }
}

/// The one INFO line of an attempt end, once its fenced write has committed (a fenced-out
/// end gets the warning instead). Hand-backs and holds for approval are not ends.
fn log_end(job: &Job, flight: Option<&InFlight>, now: chrono::DateTime<chrono::Utc>) {
    let (Job::End(r), Some(f)) = (job, flight) else {
        return;
    };
    let outcome = match &r.outcome {
        crate::run::Outcome::Final(s) => s.as_str(),
        crate::run::Outcome::Retry(_) => "retried",
        crate::run::Outcome::Suspend(_) => "suspended",
        crate::run::Outcome::AwaitApproval { .. } => return,
    };
    let took = f
        .run
        .started_at
        .and_then(|s| (now - s).to_std().ok())
        .unwrap_or_default();
    // Whole milliseconds: `1.234s`, not nanoseconds.
    let took = Duration::from_millis(took.as_millis() as u64);
    // Its own target, so busy workers can drop these (`--log info,toolq::run_end=off`).
    tracing::info!(
        target: "toolq::run_end",
        run_id = %r.id,
        tool = %f.run.tool,
        session = %r.session_id,
        outcome = %outcome,
        attempt = r.attempt,
        duration = %crate::clock::format_elapsed(took),
        "run ended"
    );
}
