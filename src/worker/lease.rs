//! Background ticks of a worker: the workers-row registration and heartbeat, lease
//! heartbeats (which also notice cancel requests), and throttled live-progress flushes.

use std::sync::Arc;

use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::execute::StopReason;
use crate::error::Result;
use crate::ids::RunId;
use crate::store::{self, codec::ts};

/// Registers this process in `workers`.
pub(super) async fn register(sh: &Arc<Shared>) -> Result<()> {
    let pid = std::process::id();
    let now = ts(sh.core.now());
    let cfg = &sh.core.config().worker;
    let row = store::WorkerRow {
        id: sh.id.to_string(),
        host: super::identity::host_of(cfg),
        boot_id: super::identity::boot_id(),
        pid_namespace: super::identity::pid_namespace(),
        pid: pid as i64,
        process_start_time: super::identity::process_start_time(pid)
            .unwrap_or_else(|| "unknown".into()),
        started_at: now.clone(),
        heartbeat_at: now,
        last_poll_at: None,
        stopped_at: None,
        stop_reason: None,
        concurrency: cfg.concurrency as i64,
        poll_interval_ms: cfg.poll_interval.as_millis() as i64,
        heartbeat_interval_ms: cfg.heartbeat_interval.as_millis() as i64,
        lease_ms: cfg.lease.as_millis() as i64,
        busy_retries: 0,
        version: env!("CARGO_PKG_VERSION").into(),
        tools: sh.tools.to_vec(),
    };
    sh.core.engine().worker_register(row).await?;
    tracing::info!(worker_id = %sh.id, pid, "worker registered");
    Ok(())
}

/// Marks this process as cleanly stopped.
pub(super) async fn deregister(sh: &Arc<Shared>) {
    let id = sh.id.to_string();
    let now = sh.core.now();
    let busy = sh.core.engine().busy_retries();
    if let Err(e) = sh.core.engine().worker_deregister(id, now, busy).await {
        tracing::warn!(error = %e, "could not mark the worker stopped");
    }
}

/// One heartbeat: extend held leases, stop attempts whose run was cancelled or taken away,
/// and heartbeat the workers row.
pub(crate) async fn heartbeat_tick(sh: &Arc<Shared>) -> Result<()> {
    let held = held_leases(sh);
    let now = sh.core.now();
    let until = crate::clock::saturating_add(
        now,
        chrono::Duration::from_std(sh.core.config().worker.lease)
            .unwrap_or(chrono::Duration::seconds(30)),
    );
    let last_poll = *sh.last_poll.lock().unwrap_or_else(|e| e.into_inner());
    let alive = sh
        .core
        .engine()
        .attempt_heartbeat(store::Heartbeat {
            worker: sh.id.to_string(),
            held: held
                .iter()
                .map(|(id, token)| (id.to_string(), token.clone()))
                .collect(),
            now,
            until,
            last_poll,
            busy_retries: sh.core.engine().busy_retries(),
        })
        .await?;
    stop_cancelled_and_lost(sh, &held, &alive);
    Ok(())
}

/// The leases this worker holds: (run id, lease token) of each run in flight.
fn held_leases(sh: &Shared) -> Vec<(RunId, String)> {
    sh.flights()
        .values()
        .map(|f| {
            (
                f.run.id.clone(),
                f.run.lease_token.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Acts on a heartbeat's answer (`alive`: the held runs still running under our lease, and
/// whether a cancel was requested): stops the cancelled attempts and those whose lease was
/// lost.
fn stop_cancelled_and_lost(sh: &Shared, held: &[(RunId, String)], alive: &[(String, bool)]) {
    let flights = sh.flights();
    for (id, token) in held {
        // The attempt the heartbeat asked about: the same run may have ended here and been
        // claimed again meanwhile (a suspension woken at once), under a new lease that this
        // answer says nothing about.
        let attempt = flights
            .get(id)
            .filter(|f| f.run.lease_token.as_deref() == Some(token.as_str()));
        match alive.iter().find(|(a, _)| a == id.as_str()) {
            Some((_, true)) => {
                if let Some(f) = attempt {
                    tracing::info!(run_id = %id, "cancel requested; stopping the run");
                    f.stop.stop(StopReason::Cancel);
                }
            }
            Some((_, false)) => {}
            None => {
                // Not running under our lease any more. If the attempt already ended here,
                // that is (almost always) our own finisher's commit, which landed between the
                // snapshot of `held` and the heartbeat's write; the finisher's fence reports a
                // real loss.
                if let Some(f) = attempt
                    && !f.ended.load(std::sync::atomic::Ordering::Acquire)
                {
                    tracing::warn!(run_id = %id, "lease lost (run rescued elsewhere); stopping this attempt");
                    f.stop.stop(StopReason::Shutdown);
                }
            }
        }
    }
}

pub(super) async fn lease_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let every = sh.core.config().worker.heartbeat_interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        if let Err(e) = heartbeat_tick(&sh).await {
            sh.store_failed("heartbeat", e);
        }
    }
}

/// One flush: write the live view (status, progress, tail, log) of runs that changed.
pub(crate) async fn flush_tick(sh: &Arc<Shared>) -> Result<()> {
    let (ops, writes, op_guards) = take_changes(sh);
    if writes.is_empty() && ops.is_empty() {
        return Ok(());
    }
    let flush = store::Flush {
        operations: ops,
        progress: writes,
        now: sh.core.now(),
    };
    // Only the ids are kept for the log lines: the writes themselves (logs) move.
    let ops: Vec<(String, i64)> = flush
        .operations
        .iter()
        .map(|o| (o.id.clone(), o.attempt))
        .collect();
    let writes: Vec<(String, i64)> = flush
        .progress
        .iter()
        .map(|w| (w.id.clone(), w.attempt))
        .collect();
    let done = sh.core.engine().attempt_flush(flush).await?;
    drop(op_guards);
    log_dropped(&ops, done.operations, "operation id");
    log_dropped(&writes, done.progress, "progress write");
    Ok(())
}

/// What the runs in flight have to flush: new operation stages (with the guards of their
/// sinks' operation writes, to hold until the write commits) and changed live views.
fn take_changes(
    sh: &Shared,
) -> (
    Vec<store::OperationWrite>,
    Vec<store::ProgressWrite>,
    Vec<OwnedMutexGuard<()>>,
) {
    let mut writes = Vec::new();
    let mut ops = Vec::new();
    // Held until the write commits (see `RunSink::operation_write_lock`); a sink whose
    // attempt is writing its last stages right now is left to that write.
    let mut op_guards = Vec::new();
    for f in sh.flights().values() {
        let token = f.run.lease_token.clone().unwrap_or_default();
        let guard = f.sink.operation_write_lock().try_lock_owned();
        if let Some((op, stages)) = guard.as_ref().ok().and_then(|_| f.sink.take_operation()) {
            ops.push(store::OperationWrite {
                id: f.run.id.to_string(),
                attempt: f.run.attempt,
                token: token.clone(),
                operation_id: op,
                stages,
            });
            op_guards.extend(guard.ok());
        }
        if let Some(snap) = f.sink.take_changes() {
            writes.push(store::ProgressWrite {
                id: f.run.id.to_string(),
                session_id: f.run.session_id.clone(),
                attempt: f.run.attempt,
                token,
                status_text: snap.status_text,
                progress: snap.progress,
                output_tail: snap.output_tail,
                log: snap.log,
            });
        }
    }
    (ops, writes, op_guards)
}

/// Logs each write of `what` (by run id and attempt) that did not apply.
fn log_dropped(ids: &[(String, i64)], applied: Vec<bool>, what: &str) {
    for ((id, attempt), ok) in ids.iter().zip(applied) {
        if !ok {
            tracing::debug!(run_id = %id, attempt,
                "{what} dropped: the attempt no longer holds the lease");
        }
    }
}

/// Writes an attempt's operation stages not yet flushed (fenced), at the end of the attempt,
/// after any periodic flush of them that is still being written.
pub(super) async fn flush_operation(
    core: &crate::core::Core,
    run: &crate::run::Run,
    sink: &crate::tool::RunSink,
) {
    let _writing = sink.operation_write_lock().lock_owned().await;
    let Some((op, stages)) = sink.take_operation() else {
        return;
    };
    let flush = store::Flush {
        operations: vec![store::OperationWrite {
            id: run.id.to_string(),
            attempt: run.attempt,
            token: run.lease_token.clone().unwrap_or_default(),
            operation_id: op,
            stages,
        }],
        progress: Vec::new(),
        now: core.now(),
    };
    if let Err(e) = core.engine().attempt_flush(flush).await {
        tracing::warn!(error = %e, "could not store the operation's last stages");
    }
}

pub(super) async fn flush_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let every = sh.core.config().worker.flush_interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = sh.flush_now.notified() => {}
            _ = stop.cancelled() => return,
        }
        if let Err(e) = flush_tick(&sh).await {
            sh.store_failed("progress flush", e);
        }
    }
}
