//! The Postgres engine's side of the contract: each [`Engine`] operation is one transaction
//! (writes, retried on a serialization failure or deadlock) or one read, composed from the
//! statements of the sibling modules.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{
    PgStore, claim, compose, finish, flow, gauges, inbox, journal, notify, occurrences,
    pipelined_tx, read_tx, retention, runs, schedules, workers, write_tx,
};
use crate::error::StoreError;
use crate::ids::{BatchId, RunId};
use crate::inbox::{InboxFilter, InboxPage, Message};
use crate::run::{
    Batch, BatchFilter, Blob, EventSent, FinishRecord, Inserted, Journal, Linked, LinkedResult,
    ListFilter, NewBatch, NewEvent, NewRun, Run, RunFilter, RunLinks,
};
use crate::schedule::model::{NewSchedule, Occurrence, Schedule};
use crate::store::engine::*;
use crate::store::prune::TableStep;
use crate::store::run_params::*;
use crate::store::types::*;
use crate::store::upkeep::*;

#[async_trait]
impl Engine for PgStore {
    async fn batch_insert(
        &self,
        batch: NewBatch,
        rows: Vec<NewRun>,
    ) -> EngineResult<Vec<Inserted>> {
        let mut rows = rows;
        for r in &mut rows {
            r.batch_id = Some(batch.id.clone());
        }
        write_tx!(self, |tx| {
            compose::create_batch(&tx, &batch).await?;
            compose::before_insert(&tx, &rows).await?;
            let done = runs::insert_many(&tx, &rows).await?;
            let later = finish::Deferred::default();
            compose::after_insert(&tx, &rows, &done, batch.created_at, &later).await?;
            later.flush(&tx, batch.created_at).await?;
            notify(&tx).await?;
            Ok(done)
        })
    }

    async fn batch_get(&self, id: BatchId) -> EngineResult<Option<Batch>> {
        read_tx!(self, |tx| compose::batch_get(&tx, id.as_str()).await)
    }

    async fn batch_list(&self, filter: BatchFilter) -> EngineResult<Vec<Batch>> {
        compose::batch_list(&self.conn().await?, &filter).await
    }

    async fn run_links(&self, id: RunId) -> EngineResult<RunLinks> {
        read_tx!(self, |tx| compose::links(&tx, id.as_str()).await)
    }

    async fn run_linked_results(
        &self,
        id: RunId,
        which: Linked,
    ) -> EngineResult<Vec<LinkedResult>> {
        read_tx!(self, |tx| compose::linked_results(&tx, id.as_str(), which)
            .await)
    }

    async fn run_insert(&self, rows: Vec<NewRun>) -> EngineResult<Vec<Inserted>> {
        pipelined_tx!(self, |tx| {
            let c = tx.client();
            // `BEGIN`, the inserts and the notification on one round trip: a notification is
            // delivered at the commit, wherever it is in the transaction.
            let ((), done, ()) = tokio::try_join!(
                biased;
                tx.begin(),
                async {
                    compose::before_insert(c, &rows).await?;
                    runs::insert_many(c, &rows).await
                },
                notify(c),
            )?;
            if let Some(now) = rows.first().map(|r| r.created_at) {
                let later = finish::Deferred::default();
                compose::after_insert(c, &rows, &done, now, &later).await?;
                later.flush(c, now).await?;
            }
            Ok(done)
        })
    }

    async fn run_insert_within_limit(&self, p: RunInsertLimited) -> EngineResult<LimitedInsert> {
        let mut p = p;
        queue_if_approved(&mut p.run, p.approval.as_ref());
        write_tx!(self, |tx| runs::insert_within_limit(&tx, &p).await)
    }

    async fn run_insert_preapproved(
        &self,
        run: NewRun,
        approval: Option<RunApprove>,
    ) -> EngineResult<()> {
        let mut run = run;
        queue_if_approved(&mut run, approval.as_ref());
        write_tx!(self, |tx| {
            runs::insert_preapproved(&tx, &run, approval.as_ref()).await
        })
    }

    async fn run_get(&self, id: RunId) -> EngineResult<Option<Run>> {
        runs::get_run(&self.conn().await?, id.as_str()).await
    }

    async fn run_list(&self, filter: ListFilter) -> EngineResult<Vec<Run>> {
        runs::list(&self.conn().await?, &filter).await
    }

    async fn run_cancel_request(&self, id: RunId, now: DateTime<Utc>) -> EngineResult<bool> {
        write_tx!(self, |tx| runs::request_cancel(&tx, id.as_str(), now).await)
    }

    async fn run_retry(&self, p: RunRetry) -> EngineResult<bool> {
        write_tx!(self, |tx| {
            compose::before_requeue(&tx, &[p.id.as_str()]).await?;
            let ok = runs::requeue_finished(&tx, p.id.as_str(), p.expected, p.now).await?;
            if let (true, Some(a)) = (ok, &p.approval) {
                runs::mark_awaiting(&tx, p.id.as_str(), a, p.now).await?;
            }
            if ok {
                let requeued = [(p.id.as_str(), p.expected)];
                let later = finish::Deferred::default();
                compose::after_requeue(&tx, &requeued, p.now, &later).await?;
                later.flush(&tx, p.now).await?;
                notify(&tx).await?;
            }
            Ok(ok)
        })
    }

    async fn run_select(&self, p: RunSelect) -> EngineResult<Vec<Run>> {
        runs::select(&self.conn().await?, &p.filter, &p.after, p.limit).await
    }

    async fn run_page(&self, p: RunPage) -> EngineResult<Vec<Run>> {
        runs::page(&self.conn().await?, &p).await
    }

    async fn run_finished_buckets(
        &self,
        since: DateTime<Utc>,
        bucket_secs: i64,
    ) -> EngineResult<Vec<FinishedBucket>> {
        runs::finished_buckets(&self.conn().await?, since, bucket_secs).await
    }

    async fn run_count_where(&self, filter: RunFilter) -> EngineResult<i64> {
        runs::count(&self.conn().await?, &filter).await
    }

    async fn run_cancel_many(&self, p: RunCancelMany) -> EngineResult<CancelledMany> {
        write_tx!(self, |tx| {
            let refs: Vec<&FinishRecord> = p.ends.iter().collect();
            let ended = finish::record_ends(&tx, &refs, p.now).await?;
            let mut requested = Vec::with_capacity(p.requests.len());
            for id in &p.requests {
                requested.push(runs::request_cancel(&tx, id.as_str(), p.now).await?);
            }
            Ok(CancelledMany { ended, requested })
        })
    }

    async fn run_retry_many(&self, p: RunRetryMany) -> EngineResult<Vec<bool>> {
        write_tx!(self, |tx| {
            let ids: Vec<&str> = p.runs.iter().map(|(id, _)| id.as_str()).collect();
            compose::before_requeue(&tx, &ids).await?;
            let mut done = Vec::with_capacity(p.runs.len());
            for (i, (id, state)) in p.runs.iter().enumerate() {
                let ok = runs::requeue_finished(&tx, id.as_str(), *state, p.now).await?;
                if let (true, Some(Some(a))) = (ok, p.approvals.get(i)) {
                    runs::mark_awaiting(&tx, id.as_str(), a, p.now).await?;
                }
                done.push(ok);
            }
            let requeued: Vec<_> = p
                .runs
                .iter()
                .zip(&done)
                .filter(|(_, ok)| **ok)
                .map(|((id, s), _)| (id.as_str(), *s))
                .collect();
            let later = finish::Deferred::default();
            compose::after_requeue(&tx, &requeued, p.now, &later).await?;
            later.flush(&tx, p.now).await?;
            if done.contains(&true) {
                notify(&tx).await?;
            }
            Ok(done)
        })
    }

    async fn run_approve(&self, p: RunApprove) -> EngineResult<bool> {
        write_tx!(self, |tx| {
            let ok = runs::approve(&tx, p.id.as_str(), &p.by, p.note.as_deref(), p.now).await?;
            if ok {
                notify(&tx).await?;
            }
            Ok(ok)
        })
    }

    async fn run_list_overdue_approvals(
        &self,
        now: DateTime<Utc>,
        limit: i64,
    ) -> EngineResult<Vec<Run>> {
        runs::overdue(&self.conn().await?, now, limit).await
    }

    async fn run_end(
        &self,
        ends: Vec<FinishRecord>,
        now: DateTime<Utc>,
    ) -> EngineResult<Vec<bool>> {
        write_tx!(self, |tx| {
            let refs: Vec<&FinishRecord> = ends.iter().collect();
            let applied = finish::record_ends(&tx, &refs, now).await?;
            if applied.contains(&true) {
                notify(&tx).await?;
            }
            Ok(applied)
        })
    }

    async fn run_pending(&self, now: DateTime<Utc>, tools: Arc<[String]>) -> EngineResult<bool> {
        runs::has_work_for(&self.conn().await?, now, &tools).await
    }

    async fn run_next_due(
        &self,
        now: DateTime<Utc>,
        tools: Arc<[String]>,
    ) -> EngineResult<Option<DateTime<Utc>>> {
        runs::next_due(&self.conn().await?, now, &tools).await
    }

    async fn run_count_unfinished(&self) -> EngineResult<i64> {
        runs::unfinished(&self.conn().await?).await
    }

    async fn attempt_claim(&self, p: Claim) -> EngineResult<Vec<Run>> {
        // Seen first without the lock (or a transaction): a worker whose candidates are all at
        // their limits claims nothing, and need not queue on the claim lock to learn it.
        if !claim::may_claim(&self.conn().await?, &p).await? {
            return Ok(Vec::new());
        }
        pipelined_tx!(self, |tx| claim::claim(tx.client(), &p, tx.begin()).await)
    }

    async fn run_journal(&self, id: RunId) -> EngineResult<Journal> {
        read_tx!(self, |tx| journal::read(&tx, id.as_str()).await)
    }

    async fn event_send(&self, e: NewEvent) -> EngineResult<EventSent> {
        write_tx!(self, |tx| {
            let sent = journal::send(&tx, &e).await?;
            // A run woken now is due: other hosts' workers learn it from the feed.
            if matches!(sent, EventSent::Stored { woke: true }) {
                notify(&tx).await?;
            }
            Ok(sent)
        })
    }

    async fn attempt_settle(&self, p: Settle) -> EngineResult<Settled> {
        use crate::store::settle;
        pipelined_tx!(self, |tx| {
            let now = p.claim.now;
            let c = tx.client();
            // Prepared outside the transaction, so that the ends' update is sent first.
            finish::prepare(c).await?;
            // Step records first, each fenced by its lease (the row stays locked to the commit).
            let mut saved = Vec::new();
            let mut released = Vec::new();
            let steps_first = settle::step_saves(&p.batch).next().is_some()
                || settle::releases(&p.batch).next().is_some();
            if steps_first {
                tx.begin().await?;
                for s in settle::step_saves(&p.batch) {
                    saved.push(journal::save(c, s, now).await?);
                }
                for r in settle::releases(&p.batch) {
                    released
                        .push(claim::release(c, r.id.as_str(), r.attempt, &r.token, now).await?);
                }
            }
            // The ends' rows, then the claim (its locks are its sessions' and limited tools'),
            // then the ends' blobs and messages, sent with the claim's update on one round
            // trip: a session's inbox lock is held from its messages to the commit only, and
            // never while waiting for a claim lock. The claim's reads without locks go on
            // the round trip of the ends' update, after it (prepared first, so it is sent
            // first): they see the slots it frees. `BEGIN`, unless sent already, goes first
            // on that round trip.
            let ends = p.ends();
            let ((), (ended, tools, later), looked) = tokio::try_join!(
                biased;
                async {
                    if steps_first { Ok(()) } else { tx.begin().await }
                },
                finish::apply_ends(c, &ends, now),
                claim::look(c, &p.claim),
            )?;
            let picked = claim::pick_looked(c, &p.claim, looked).await?;
            let (claimed, ()) = claim::take_then(c, &p.claim, picked, later.flush(c, now)).await?;
            // Other workers are woken only for a slot that stays free: waking them all at
            // every settle only has them look and find nothing.
            if settle::frees_a_slot(&ends, &ended, &tools, &released, &claimed) {
                notify(c).await?;
            }
            let applied = settle::applied(&p.batch, &ended, &released, &saved);
            Ok(Settled { applied, claimed })
        })
    }

    async fn attempt_heartbeat(&self, p: Heartbeat) -> EngineResult<Vec<(String, bool)>> {
        write_tx!(self, |tx| {
            workers::heartbeat(&tx, &p.worker, p.now, p.last_poll, p.busy_retries).await?;
            claim::heartbeat(&tx, &p.worker, &p.held, p.now, p.until).await
        })
    }

    async fn attempt_flush(&self, p: Flush) -> EngineResult<Flushed> {
        write_tx!(self, |tx| {
            let mut operations = Vec::with_capacity(p.operations.len());
            for o in &p.operations {
                operations.push(
                    claim::set_operation_stages(
                        &tx,
                        &o.id,
                        o.attempt,
                        &o.token,
                        &o.operation_id,
                        &o.stages,
                    )
                    .await?,
                );
            }
            let mut progress = Vec::with_capacity(p.progress.len());
            for w in &p.progress {
                progress.push(claim::write_progress(&tx, w, p.now).await?);
            }
            Ok(Flushed {
                operations,
                progress,
            })
        })
    }

    async fn attempt_rescue(&self, p: Rescue, decide: DecideRescue) -> EngineResult<Rescued> {
        use super::rescue;
        use crate::store::rescue_plan::{FirstLook, Taken};
        let look = {
            let c = self.conn().await?;
            let live = rescue::live_workers_on(&c, &p.host, &p.boot_id, &p.pid_namespace).await?;
            FirstLook::of(&p, live, &rescue::rescuable(&c, p.now).await?)
        };
        if !look.worth_a_write() {
            return Ok(Rescued::default());
        }
        // Looks again inside the write: every write in it is fenced anyway.
        write_tx!(self, |tx| {
            let died = rescue::mark_died(&tx, &look.dead, p.now).await?;
            let taken = Taken::decide(&p, rescue::rescuable(&tx, p.now).await?, &decide);
            let applied = finish::record_ends(&tx, &taken.records(), p.now).await?;
            let done = taken.rescued(died, &applied);
            if !done.runs.is_empty() {
                notify(&tx).await?;
            }
            Ok(done)
        })
    }

    async fn pause_set(&self, pause: crate::flow::Pause) -> EngineResult<bool> {
        write_tx!(self, |tx| flow::pause(&tx, &pause).await)
    }

    async fn pause_clear(
        &self,
        scope: crate::flow::PauseScope,
    ) -> EngineResult<Option<crate::flow::Pause>> {
        write_tx!(self, |tx| {
            let found = flow::resume(&tx, &scope).await?;
            if found.is_some() {
                notify(&tx).await?;
            }
            Ok(found)
        })
    }

    async fn pause_list(&self) -> EngineResult<Vec<crate::flow::Pause>> {
        flow::list(&self.conn().await?).await
    }

    async fn limit_next_open(
        &self,
        now: DateTime<Utc>,
        rates: Vec<(String, crate::flow::Rate)>,
    ) -> EngineResult<Option<DateTime<Utc>>> {
        flow::next_open(&self.conn().await?, now, &rates).await
    }

    async fn limit_room(
        &self,
        tool: String,
        rate: crate::flow::Rate,
        now: DateTime<Utc>,
    ) -> EngineResult<crate::flow::Room> {
        flow::room(&self.conn().await?, &tool, rate, now).await
    }

    async fn limit_running(&self, tool: String) -> EngineResult<i64> {
        flow::running(&self.conn().await?, &tool).await
    }

    async fn worker_register(&self, row: WorkerRow) -> EngineResult<()> {
        write_tx!(self, |tx| workers::register(&tx, &row).await)
    }

    async fn worker_deregister(
        &self,
        id: String,
        now: DateTime<Utc>,
        busy_retries: u64,
    ) -> EngineResult<()> {
        write_tx!(self, |tx| workers::deregister(&tx, &id, now, busy_retries)
            .await)
    }

    async fn worker_list(&self, include_stopped: bool) -> EngineResult<Vec<WorkerRow>> {
        workers::list(&self.conn().await?, include_stopped).await
    }

    async fn worker_overview(&self, include_stopped: bool) -> EngineResult<WorkerOverview> {
        read_tx!(self, |tx| {
            Ok(WorkerOverview {
                workers: workers::list(&tx, include_stopped).await?,
                queued_by_tool: runs::queued_by_tool(&tx).await?,
                enabled_schedules: schedules::enabled_count(&tx).await?,
            })
        })
    }

    async fn inbox_list(&self, session: String, filter: InboxFilter) -> EngineResult<Vec<Message>> {
        inbox::list(&self.conn().await?, &session, &filter).await
    }

    async fn inbox_page(&self, session: String, page: InboxPage) -> EngineResult<Vec<Message>> {
        inbox::page(&self.conn().await?, &session, &page).await
    }

    async fn inbox_deliverable(
        &self,
        session: String,
        modes: &'static [&'static str],
        limit: i64,
    ) -> EngineResult<Vec<Message>> {
        inbox::deliverable(&self.conn().await?, &session, modes, limit).await
    }

    async fn inbox_mark(&self, p: InboxMark) -> EngineResult<usize> {
        write_tx!(self, |tx| inbox::mark(
            &tx, &p.session, &p.ids, p.ack, p.now
        )
        .await)
    }

    fn inbox_ids_in_commit_order(&self) -> bool {
        false
    }

    async fn inbox_newest_id(&self) -> EngineResult<i64> {
        inbox::newest_id(&self.conn().await?).await
    }

    async fn inbox_of_run(&self, run: RunId, limit: i64) -> EngineResult<Vec<Message>> {
        inbox::of_run(&self.conn().await?, run.as_str(), limit).await
    }

    async fn blob_get(&self, session: String, path: String) -> EngineResult<Option<Blob>> {
        inbox::blob(&self.conn().await?, &session, &path).await
    }

    async fn schedule_insert_within_limit(
        &self,
        new: NewSchedule,
        max_active: i64,
    ) -> EngineResult<bool> {
        write_tx!(self, |tx| {
            if schedules::count_active(&tx, &new.session_id).await? >= max_active {
                return Ok(false);
            }
            schedules::insert(&tx, &new).await?;
            notify(&tx).await?;
            Ok(true)
        })
    }

    async fn schedule_get(&self, id: String) -> EngineResult<Option<Schedule>> {
        schedules::get_one(&self.conn().await?, &id).await
    }

    async fn schedule_list(
        &self,
        session: Option<String>,
        limit: i64,
    ) -> EngineResult<Vec<Schedule>> {
        schedules::list(&self.conn().await?, session.as_deref(), limit).await
    }

    async fn schedule_occurrences(&self, id: String, limit: i64) -> EngineResult<Vec<Occurrence>> {
        occurrences::list(&self.conn().await?, &id, limit).await
    }

    async fn schedule_cancel(&self, id: String, now: DateTime<Utc>) -> EngineResult<bool> {
        write_tx!(self, |tx| schedules::cancel(&tx, &id, now).await)
    }

    async fn schedule_disable(&self, id: String, now: DateTime<Utc>) -> EngineResult<bool> {
        write_tx!(self, |tx| schedules::disable(&tx, &id, now).await)
    }

    async fn schedule_enable_within_limit(&self, p: ScheduleEnable) -> EngineResult<Option<bool>> {
        write_tx!(self, |tx| {
            if schedules::count_active(&tx, &p.session).await? >= p.max_active {
                return Ok(None);
            }
            let ok = schedules::enable(&tx, &p.id, p.next, p.now).await?;
            if ok {
                notify(&tx).await?;
            }
            Ok(Some(ok))
        })
    }

    async fn schedule_next_due(&self) -> EngineResult<Option<DateTime<Utc>>> {
        schedules::next_due(&self.conn().await?).await
    }

    async fn schedule_claim_due(&self, p: ClaimDue, gate: GateRun) -> EngineResult<ClaimReport> {
        write_tx!(self, |tx| schedules::claim_due(&tx, &p, &gate).await)
    }

    async fn prune_count(&self, cutoffs: PruneCutoffs) -> EngineResult<Removed> {
        read_tx!(self, |tx| retention::count_prunable(&tx, &cutoffs).await)
    }

    async fn prune_batch(&self, p: PruneBatch) -> EngineResult<(Removed, RunsCursor)> {
        write_tx!(self, |tx| {
            // A retried transaction starts from the same cursor.
            let mut cur = p.cursor.clone();
            let (c, batch) = (&p.cutoffs, p.batch);
            let removed = match TableStep::of(p.step) {
                None => retention::prune_runs_batch(&tx, c, batch, &mut cur).await?,
                Some(t) => t.removed(retention::prune_table_batch(&tx, t, c, batch).await?),
            };
            Ok((removed, cur))
        })
    }

    async fn stats_read(&self, now: DateTime<Utc>) -> EngineResult<StoreStats> {
        read_tx!(self, |tx| {
            Ok(StoreStats {
                by_state: runs::count_by_state(&tx).await?,
                oldest_queued: runs::oldest_queued(&tx, now).await?,
                busy_retries: workers::total_busy_retries(&tx).await?,
                live_workers: workers::list(&tx, false).await?.len(),
                waiting: runs::count_waiting(&tx).await?,
            })
        })
    }

    async fn gauges_read(&self, now: DateTime<Utc>) -> EngineResult<Gauges> {
        read_tx!(self, |tx| {
            Ok(Gauges {
                by_state: runs::count_by_state(&tx).await?,
                queue_depth: gauges::queue_depth(&tx).await?,
                schedule_lag_secs: schedules::lag_secs(&tx, now).await?,
            })
        })
    }

    async fn check(&self, _quick: bool) -> EngineResult<Vec<String>> {
        Err(StoreError::Unsupported {
            what: format!(
                "toolq check runs SQLite's integrity check; {} is a Postgres database: check it \
                 with the server's own tools (pg_amcheck)",
                self.location()
            ),
        })
    }

    async fn info(&self) -> EngineResult<DbInfo> {
        gauges::server_info(&self.conn().await?).await
    }

    fn location(&self) -> String {
        PgStore::location(self).to_string()
    }

    fn size_bytes(&self) -> Option<u64> {
        None
    }

    fn busy_retries(&self) -> u64 {
        PgStore::busy_retries(self)
    }

    fn write_stats(&self) -> WriteStats {
        PgStore::write_stats(self)
    }

    async fn wal_health(&self, _warn_frames: i64) -> EngineResult<WalHealth> {
        Ok(WalHealth {
            wal_bytes: 0,
            checkpoint: Checkpoint {
                busy: false,
                log_frames: 0,
                checkpointed_frames: 0,
            },
            warning: None,
        })
    }

    fn wal_bytes(&self) -> u64 {
        0
    }

    async fn checkpoint(&self, _idle: bool) -> EngineResult<CheckpointTick> {
        // The server checkpoints its own WAL.
        Ok(CheckpointTick {
            mode: CheckpointMode::Passive,
            checkpoint: Checkpoint {
                busy: false,
                log_frames: 0,
                checkpointed_frames: 0,
            },
            wal_bytes: 0,
        })
    }

    async fn change_feed(&self, on_change: OnChange, stop: CancellationToken) {
        use super::change_feed::{WORKER_CHANNELS, listen};
        listen(self.clone(), WORKER_CHANNELS, on_change, stop).await;
    }

    async fn message_feed(&self, on_change: OnChange, stop: CancellationToken) {
        use super::change_feed::{MESSAGE_CHANNELS, listen};
        listen(self.clone(), MESSAGE_CHANNELS, on_change, stop).await;
    }
}
