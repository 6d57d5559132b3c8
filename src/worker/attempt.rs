//! One attempt in this worker, from a claimed run to what the finisher records: [`start`]
//! holds the run for approval, or enters it in flight and spawns its task; the task executes
//! the tool, flushes its last operation stages and sends its end (or its hand-back).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::approval;
use super::execute::{Executed, StopSignal, execute};
use super::finish::{AttemptEnd, decide};
use super::journal;
use super::lease;
use super::shared::{InFlight, Job, Shared};
use crate::config::RunDefaults;
use crate::core::Core;
use crate::run::Run;
use crate::store;
use crate::tool::sink::{RunSink, SinkLimits};
use crate::tool::{Tool, ToolContext, ToolHost, ToolOutcome};
use crate::trace::{Parent, Span, names};
use opentelemetry::KeyValue;

/// The target of this file's span and events: the one they had in `worker/mod.rs`, which log
/// filters and readers of the log (the crash tests count `toolq::worker: started`) name.
const TARGET: &str = "toolq::worker";

/// Starts a claimed run: holds it for approval when it needs one, else runs it in its own
/// task, which sends its end to the finisher over `jobs`.
pub(super) fn start(sh: &Arc<Shared>, run: Run, jobs: mpsc::UnboundedSender<Job>) {
    let core = sh.core.clone();
    if approval::hold_for_approval(&core, &run, &jobs) {
        return;
    }
    let trace = claim_span(&run);
    let attempt = Attempt::track(sh, core, run, trace);
    let run = &attempt.run;
    let span = tracing::info_span!(target: TARGET, "run", run_id = %run.id, tool = %run.tool, session = %run.session_id, attempt = run.attempt);
    tokio::spawn(attempt.run(jobs).instrument(span));
}

/// The run's stored traceparent (None: a run enqueued without one, e.g. fired by a schedule).
fn traceparent(run: &Run) -> Option<&str> {
    run.traceparent.as_deref()
}

/// Sends the claim's span and returns what the attempt's other spans hang under: the run's
/// stored traceparent, or, for a run without one, the claim span (a new trace).
fn claim_span(run: &Run) -> Span {
    let tp = traceparent(run);
    let claim = Span::start(names::CLAIM, Parent::Traceparent(tp), None, || {
        run_attributes(run)
    });
    match tp {
        Some(_) => {
            claim.end();
            Span::remote(tp)
        }
        None => claim.ended(),
    }
}

/// The attributes every span of a run's attempt carries.
pub(super) fn run_attributes(run: &Run) -> Vec<KeyValue> {
    vec![
        KeyValue::new("run.id", run.id.to_string()),
        KeyValue::new("tool", run.tool.clone()),
        KeyValue::new("session", run.session_id.clone()),
        KeyValue::new("attempt", run.attempt),
    ]
}

/// An attempt in flight: what its task needs.
struct Attempt {
    sh: Arc<Shared>,
    core: Core,
    host: Arc<dyn ToolHost>,
    run: Arc<Run>,
    /// `None`: the tool is not registered in this worker.
    tool: Option<Arc<dyn Tool>>,
    sink: RunSink,
    stop: StopSignal,
    /// Shared with the in-flight entry (see [`InFlight::ended`]).
    ended: Arc<AtomicBool>,
    defaults: RunDefaults,
    timeout: Duration,
    /// How long a stopped tool has before it is dropped.
    grace: Duration,
    /// What the attempt's spans hang under ([`InFlight::trace`]).
    trace: Span,
}

impl Attempt {
    /// Sets up `run`'s sink, stop signal and time limit, and enters it in the worker's
    /// in-flight map.
    fn track(sh: &Arc<Shared>, core: Core, run: Run, trace: Span) -> Attempt {
        let defaults = core.config().runs.clone();
        let sink = RunSink::new(SinkLimits {
            log_cap: defaults.log_cap_bytes,
            tail_chars: defaults.tail_chars,
        })
        .flush_on_operation(sh.flush_now.clone());
        let stop = StopSignal::default();
        let entry = core.registry().get(&run.tool);
        let (timeout, _) = crate::tool::time_limit::time_limit(
            run.timeout_ms,
            entry.and_then(|e| e.def.timeout),
            defaults.timeout,
        );
        let tool = entry.map(|e| e.tool.clone());
        let run = Arc::new(run);
        let ended = Arc::new(AtomicBool::new(false));
        sh.flights().insert(
            run.id.clone(),
            InFlight {
                run: run.clone(),
                sink: sink.clone(),
                stop: stop.clone(),
                ended: ended.clone(),
                trace: trace.clone(),
            },
        );
        let grace = core.config().worker.cancel_grace;
        Attempt {
            sh: sh.clone(),
            core,
            host: sh.host.clone(),
            run,
            tool,
            sink,
            stop,
            ended,
            defaults,
            timeout,
            grace,
            trace,
        }
    }

    /// The attempt's task: executes the tool, then sends the finisher its settlement.
    async fn run(self, jobs: mpsc::UnboundedSender<Job>) {
        let Attempt {
            sh,
            core,
            host,
            run,
            tool,
            sink,
            stop,
            ended,
            defaults,
            timeout,
            grace,
            trace,
        } = self;
        let span = Span::start(names::EXECUTE, Parent::Span(&trace), None, || {
            run_attributes(&run)
        });
        tracing::debug!(target: TARGET, "started");
        if run.resumed {
            restore_log(&core, &run, &sink).await;
        }
        let (durable, suspend) = journal::journal_of(&sh, &run, &jobs);
        let executed = match tool {
            None => Executed::End(AttemptEnd::Returned(ToolOutcome::Internal(format!(
                "tool {:?} is not registered in this worker",
                run.tool
            )))),
            Some(tool) => {
                let ctx = tool_context(&core, host, &run, &sink, &stop, durable.clone());
                // The tool's steps, waits and enqueues see the execute span as current.
                crate::trace::within(&span, execute(tool, ctx, timeout, grace, stop, suspend)).await
            }
        };
        // Stages reported after the last flush still belong in the history.
        lease::flush_operation(&core, &run, &sink).await;
        let mut job = settlement(&core, &run, executed, &sink, &defaults);
        if let Job::End(rec) = &job {
            let outcome = outcome_name(&rec.outcome);
            span.set(|| vec![KeyValue::new("outcome", outcome)]);
            if outcome == "failed" {
                span.fail(|| rec.error.clone().unwrap_or_default());
            }
        }
        span.end();
        // Waits that ended in this invocation are recorded with its end.
        if let Job::End(rec) = &mut job
            && !matches!(rec.outcome, crate::run::Outcome::Suspend(_))
        {
            rec.steps = durable.take_deferred().await;
        }
        ended.store(true, Ordering::Release);
        if jobs.send(job).is_err() {
            tracing::error!(target: TARGET, "finisher is gone; the run's lease will expire and it will be rescued");
        }
    }
}

/// An end's outcome as spans and metrics name it.
pub(super) fn outcome_name(outcome: &crate::run::Outcome) -> &'static str {
    match outcome {
        crate::run::Outcome::Final(s) => s.as_str(),
        crate::run::Outcome::Retry(_) => "retried",
        crate::run::Outcome::AwaitApproval { .. } => "awaiting_approval",
        crate::run::Outcome::Suspend(_) => "suspended",
    }
}

/// What the tool gets for this attempt.
fn tool_context(
    core: &Core,
    host: Arc<dyn ToolHost>,
    run: &Run,
    sink: &RunSink,
    stop: &StopSignal,
    durable: crate::tool::Durable,
) -> ToolContext {
    ToolContext {
        run_id: run.id.clone(),
        session_id: run.session_id.clone(),
        title: run.title.clone(),
        args: run.args.clone(),
        attempt: run.attempt,
        sink: sink.clone(),
        cancel: CancellationToken::new(),
        stop: stop.clone(),
        operation_id: run.operation_id.clone(),
        host: Some(host),
        clock: core.clock().clone(),
        durable,
    }
}

/// Puts the log that the run's earlier invocations wrote before they suspended back into
/// the sink: the attempt's log grows across its waits instead of starting over.
async fn restore_log(core: &Core, run: &Run, sink: &RunSink) {
    match core
        .engine()
        .blob_get(run.session_id.clone(), run.log_path())
        .await
    {
        Ok(Some(blob)) => sink.restore_log(&blob.content),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(target: TARGET, error = %e, "could not read the log written before the run suspended; it goes on with a new one")
        }
    }
}

/// What the finisher records for an execution: the decided end, or a hand-back.
fn settlement(
    core: &Core,
    run: &Run,
    executed: Executed,
    sink: &RunSink,
    defaults: &RunDefaults,
) -> Job {
    match executed {
        Executed::End(end) => {
            if let AttemptEnd::Returned(ToolOutcome::Internal(detail))
            | AttemptEnd::Panicked(detail) = &end
            {
                tracing::error!(target: TARGET, internal_error = %detail, "attempt failed with an internal error");
            }
            let record = decide(
                run,
                end,
                sink.final_snapshot(),
                defaults,
                &core.config().retry_policy(&run.tool),
                core.now(),
                rand::random::<f64>(),
            );
            Job::End(Box::new(core.finish_record(&run.tool, record)))
        }
        Executed::HandBack => Job::Release(store::Release {
            id: run.id.clone(),
            attempt: run.attempt,
            token: run.lease_token.clone().unwrap_or_default(),
        }),
    }
}
