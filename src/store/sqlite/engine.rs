//! The SQLite engine's side of the contract: each [`Engine`] operation is one write
//! transaction (`BEGIN IMMEDIATE` on the writer) or one read on a pooled reader, composed
//! from the statements of the sibling modules.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use super::{
    Store, approvals, artifacts, bulk, claim, compose, dashboard, due, finish, flow, gauges, inbox,
    inbox_page, journal, occurrences, rescue, retention, runs, schedules, workers,
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

fn claim_params(c: &Claim) -> claim::ClaimParams<'_> {
    claim::ClaimParams {
        worker: &c.worker,
        now: c.now,
        lease_until: c.lease_until,
        max: c.max,
        per_session: c.per_session,
        after_session: c.after_session.as_deref(),
        tools: &c.tools,
        limits: &c.limits,
        background_room: c.background_room,
    }
}

#[async_trait]
impl Engine for Store {
    async fn run_insert(&self, rows: Vec<NewRun>) -> EngineResult<Vec<Inserted>> {
        self.write_async(move |tx| {
            let inserted = runs::insert_many(tx, &rows)?;
            if let Some(now) = rows.first().map(|r| r.created_at) {
                compose::after_insert(tx, finish::record_ends_plain, &rows, &inserted, now)?;
            }
            Ok(inserted)
        })
        .await
    }

    async fn run_insert_within_limit(&self, p: RunInsertLimited) -> EngineResult<LimitedInsert> {
        let mut p = p;
        queue_if_approved(&mut p.run, p.approval.as_ref());
        self.write_async(move |tx| runs::insert_within_limit(tx, &p))
            .await
    }

    async fn run_insert_preapproved(
        &self,
        run: NewRun,
        approval: Option<RunApprove>,
    ) -> EngineResult<()> {
        let mut run = run;
        queue_if_approved(&mut run, approval.as_ref());
        self.write_async(move |tx| runs::insert_preapproved(tx, &run, approval.as_ref()))
            .await
    }

    async fn run_get(&self, id: RunId) -> EngineResult<Option<Run>> {
        self.read_async(move |c| runs::get(c, id.as_str())).await
    }

    async fn run_list(&self, filter: ListFilter) -> EngineResult<Vec<Run>> {
        self.read_async(move |c| runs::list(c, &filter)).await
    }

    async fn run_cancel_request(&self, id: RunId, now: DateTime<Utc>) -> EngineResult<bool> {
        self.write_async(move |tx| runs::request_cancel(tx, &id, now))
            .await
    }

    async fn run_retry(&self, p: RunRetry) -> EngineResult<bool> {
        self.write_async(move |tx| {
            let ok = runs::requeue_finished(tx, &p.id, p.expected, p.now)?;
            if let (true, Some(a)) = (ok, &p.approval) {
                runs::mark_awaiting(tx, &p.id, a, p.now)?;
            }
            if ok {
                compose::after_requeue(
                    tx,
                    finish::record_ends_plain,
                    &[(p.id.as_str(), p.expected)],
                    p.now,
                )?;
            }
            Ok(ok)
        })
        .await
    }

    async fn run_select(&self, p: RunSelect) -> EngineResult<Vec<Run>> {
        self.read_async(move |c| bulk::select(c, &p.filter, &p.after, p.limit))
            .await
    }

    async fn run_count_where(&self, filter: RunFilter) -> EngineResult<i64> {
        self.read_async(move |c| bulk::count(c, &filter)).await
    }

    async fn run_page(&self, p: RunPage) -> EngineResult<Vec<Run>> {
        self.read_async(move |c| dashboard::page(c, &p)).await
    }

    async fn run_finished_buckets(
        &self,
        since: DateTime<Utc>,
        bucket_secs: i64,
    ) -> EngineResult<Vec<FinishedBucket>> {
        self.read_async(move |c| dashboard::finished_buckets(c, since, bucket_secs))
            .await
    }

    async fn run_cancel_many(&self, p: RunCancelMany) -> EngineResult<CancelledMany> {
        self.write_async(move |tx| {
            let refs: Vec<&FinishRecord> = p.ends.iter().collect();
            let ended = finish::record_ends(tx, &refs, p.now)?;
            let requested = bulk::request_cancel_many(tx, &p.requests, p.now)?;
            Ok(CancelledMany { ended, requested })
        })
        .await
    }

    async fn run_retry_many(&self, p: RunRetryMany) -> EngineResult<Vec<bool>> {
        self.write_async(move |tx| bulk::retry_many(tx, &p.runs, &p.approvals, p.now))
            .await
    }

    async fn run_approve(&self, p: RunApprove) -> EngineResult<bool> {
        self.write_async(move |tx| approvals::approve(tx, &approvals::Decision::of(&p)))
            .await
    }

    async fn run_list_overdue_approvals(
        &self,
        now: DateTime<Utc>,
        limit: i64,
    ) -> EngineResult<Vec<Run>> {
        self.read_async(move |c| approvals::overdue(c, now, limit))
            .await
    }

    async fn run_end(
        &self,
        ends: Vec<FinishRecord>,
        now: DateTime<Utc>,
    ) -> EngineResult<Vec<bool>> {
        self.write_async(move |tx| {
            let refs: Vec<&FinishRecord> = ends.iter().collect();
            finish::record_ends(tx, &refs, now)
        })
        .await
    }

    async fn run_pending(&self, now: DateTime<Utc>, tools: Arc<[String]>) -> EngineResult<bool> {
        self.read_async(move |c| due::has_work_for(c, now, &tools))
            .await
    }

    async fn run_next_due(
        &self,
        now: DateTime<Utc>,
        tools: Arc<[String]>,
    ) -> EngineResult<Option<DateTime<Utc>>> {
        self.read_async(move |c| due::next_due(c, now, &tools))
            .await
    }

    async fn run_count_unfinished(&self) -> EngineResult<i64> {
        self.read_async(gauges::unfinished).await
    }

    async fn run_journal(&self, id: RunId) -> EngineResult<Journal> {
        self.read_async(move |c| journal::read(c, id.as_str()))
            .await
    }

    async fn event_send(&self, e: NewEvent) -> EngineResult<EventSent> {
        self.write_async(move |tx| journal::send(tx, &e)).await
    }

    async fn batch_insert(
        &self,
        batch: NewBatch,
        rows: Vec<NewRun>,
    ) -> EngineResult<Vec<Inserted>> {
        let mut rows = rows;
        for r in &mut rows {
            r.batch_id = Some(batch.id.clone());
        }
        self.write_async(move |tx| {
            compose::create_batch(tx, &batch)?;
            let inserted = runs::insert_many(tx, &rows)?;
            compose::after_insert(
                tx,
                finish::record_ends_plain,
                &rows,
                &inserted,
                batch.created_at,
            )?;
            Ok(inserted)
        })
        .await
    }

    async fn batch_get(&self, id: BatchId) -> EngineResult<Option<Batch>> {
        self.read_async(move |c| compose::batch_get(c, id.as_str()))
            .await
    }

    async fn batch_list(&self, filter: BatchFilter) -> EngineResult<Vec<Batch>> {
        self.read_async(move |c| compose::batch_list(c, &filter))
            .await
    }

    async fn run_links(&self, id: RunId) -> EngineResult<RunLinks> {
        self.read_async(move |c| compose::links(c, id.as_str()))
            .await
    }

    async fn run_linked_results(
        &self,
        id: RunId,
        which: Linked,
    ) -> EngineResult<Vec<LinkedResult>> {
        self.read_async(move |c| compose::linked_results(c, id.as_str(), which))
            .await
    }

    async fn attempt_claim(&self, p: Claim) -> EngineResult<Vec<Run>> {
        // Seen first on a reader: a worker whose candidates are all at their limits claims
        // nothing, and need not take the write lock to learn it (`claim::may_claim`).
        let seen = p.clone();
        if !self
            .read_async(move |c| claim::may_claim(c, &claim_params(&seen)))
            .await?
        {
            return Ok(Vec::new());
        }
        self.write_async(move |tx| claim::claim(tx, &claim_params(&p)))
            .await
    }

    async fn attempt_settle(&self, p: Settle) -> EngineResult<Settled> {
        use crate::store::settle;
        self.write_async(move |tx| {
            let now = p.claim.now;
            // Step saves first, while their leases hold: a release of the same attempt in
            // this batch must not fence out a step whose closure already ran.
            let saved = journal::save_many(tx, settle::step_saves(&p.batch), now)?;
            let released = settle::releases(&p.batch)
                .map(|r| claim::release(tx, r.id.as_str(), r.attempt, &r.token, now))
                .collect::<Result<Vec<bool>, _>>()?;
            // The one end-writer for every end in the batch, a few statements for all.
            let ended = finish::record_ends(tx, &p.ends(), now)?;
            let claimed = claim::claim(tx, &claim_params(&p.claim))?;
            let applied = settle::applied(&p.batch, &ended, &released, &saved);
            Ok(Settled { applied, claimed })
        })
        .await
    }

    async fn attempt_heartbeat(&self, p: Heartbeat) -> EngineResult<Vec<(String, bool)>> {
        self.write_async(move |tx| {
            workers::heartbeat(tx, &p.worker, p.now, p.last_poll, p.busy_retries)?;
            claim::heartbeat(tx, &p.worker, &p.held, p.now, p.until)
        })
        .await
    }

    async fn attempt_flush(&self, p: Flush) -> EngineResult<Flushed> {
        self.write_async(move |tx| {
            let operations = p
                .operations
                .iter()
                .map(|o| {
                    claim::set_operation_stages(
                        tx,
                        &o.id,
                        o.attempt,
                        &o.token,
                        &o.operation_id,
                        &o.stages,
                    )
                })
                .collect::<Result<Vec<bool>, _>>()?;
            let progress = p
                .progress
                .iter()
                .map(|w| claim::write_progress(tx, w, p.now))
                .collect::<Result<Vec<bool>, _>>()?;
            Ok(Flushed {
                operations,
                progress,
            })
        })
        .await
    }

    async fn attempt_rescue(&self, p: Rescue, decide: DecideRescue) -> EngineResult<Rescued> {
        use crate::store::rescue_plan::{FirstLook, Taken};
        let here = p.clone();
        let look = self
            .read_async(move |c| {
                let loc = rescue::Locality {
                    host: &here.host,
                    boot_id: &here.boot_id,
                    pid_namespace: &here.pid_namespace,
                };
                let live = rescue::live_workers_on(c, &loc)?;
                Ok(FirstLook::of(&here, live, &rescue::rescuable(c, here.now)?))
            })
            .await?;
        if !look.worth_a_write() {
            return Ok(Rescued::default());
        }
        // Looks again inside the write: every write in it is fenced anyway.
        self.write_async(move |tx| {
            let died = rescue::mark_died(tx, &look.dead, p.now)?;
            let taken = Taken::decide(&p, rescue::rescuable(tx, p.now)?, &decide);
            let applied = finish::record_ends(tx, &taken.records(), p.now)?;
            Ok(taken.rescued(died, &applied))
        })
        .await
    }

    async fn pause_set(&self, pause: crate::flow::Pause) -> EngineResult<bool> {
        self.write_async(move |tx| flow::pause(tx, &pause)).await
    }

    async fn pause_clear(
        &self,
        scope: crate::flow::PauseScope,
    ) -> EngineResult<Option<crate::flow::Pause>> {
        self.write_async(move |tx| flow::resume(tx, &scope)).await
    }

    async fn pause_list(&self) -> EngineResult<Vec<crate::flow::Pause>> {
        self.read_async(flow::list).await
    }

    async fn limit_next_open(
        &self,
        now: DateTime<Utc>,
        rates: Vec<(String, crate::flow::Rate)>,
    ) -> EngineResult<Option<DateTime<Utc>>> {
        self.read_async(move |c| flow::next_open(c, now, &rates))
            .await
    }

    async fn limit_room(
        &self,
        tool: String,
        rate: crate::flow::Rate,
        now: DateTime<Utc>,
    ) -> EngineResult<crate::flow::Room> {
        self.read_async(move |c| flow::room(c, &tool, rate, now))
            .await
    }

    async fn limit_running(&self, tool: String) -> EngineResult<i64> {
        self.read_async(move |c| flow::running(c, &tool)).await
    }

    async fn worker_register(&self, row: WorkerRow) -> EngineResult<()> {
        self.write_async(move |tx| workers::register(tx, &row))
            .await
    }

    async fn worker_deregister(
        &self,
        id: String,
        now: DateTime<Utc>,
        busy_retries: u64,
    ) -> EngineResult<()> {
        self.write_async(move |tx| workers::deregister(tx, &id, now, busy_retries))
            .await
    }

    async fn worker_list(&self, include_stopped: bool) -> EngineResult<Vec<WorkerRow>> {
        self.read_async(move |c| workers::list(c, include_stopped))
            .await
    }

    async fn worker_overview(&self, include_stopped: bool) -> EngineResult<WorkerOverview> {
        self.read_async(move |c| {
            Ok(WorkerOverview {
                workers: workers::list(c, include_stopped)?,
                queued_by_tool: due::queued_by_tool(c)?,
                enabled_schedules: due::enabled_schedules(c)?,
            })
        })
        .await
    }

    async fn inbox_list(&self, session: String, filter: InboxFilter) -> EngineResult<Vec<Message>> {
        self.read_async(move |c| inbox::list(c, &session, &filter))
            .await
    }

    async fn inbox_newest_id(&self) -> EngineResult<i64> {
        self.read_async(inbox::newest_id).await
    }

    async fn inbox_of_run(&self, run: RunId, limit: i64) -> EngineResult<Vec<Message>> {
        self.read_async(move |c| dashboard::messages_of_run(c, run.as_str(), limit))
            .await
    }

    async fn inbox_page(&self, session: String, page: InboxPage) -> EngineResult<Vec<Message>> {
        self.read_async(move |c| inbox_page::inbox_page(c, &session, &page))
            .await
    }

    async fn inbox_deliverable(
        &self,
        session: String,
        modes: &'static [&'static str],
        limit: i64,
    ) -> EngineResult<Vec<Message>> {
        self.read_async(move |c| inbox::unacked_with_delivery(c, &session, modes, limit))
            .await
    }

    async fn inbox_mark(&self, p: InboxMark) -> EngineResult<usize> {
        self.write_async(move |tx| {
            if p.ack {
                inbox::ack(tx, &p.session, &p.ids, p.now)
            } else {
                inbox::mark_read(tx, &p.session, &p.ids, p.now)
            }
        })
        .await
    }

    async fn blob_get(&self, session: String, path: String) -> EngineResult<Option<Blob>> {
        self.read_async(move |c| artifacts::get(c, &session, &path))
            .await
    }

    async fn schedule_insert_within_limit(
        &self,
        new: NewSchedule,
        max_active: i64,
    ) -> EngineResult<bool> {
        self.write_async(move |tx| {
            if schedules::count_active(tx, &new.session_id)? >= max_active {
                return Ok(false);
            }
            schedules::insert(tx, &new)?;
            Ok(true)
        })
        .await
    }

    async fn schedule_get(&self, id: String) -> EngineResult<Option<Schedule>> {
        self.read_async(move |c| schedules::get(c, &id)).await
    }

    async fn schedule_list(
        &self,
        session: Option<String>,
        limit: i64,
    ) -> EngineResult<Vec<Schedule>> {
        self.read_async(move |c| schedules::list(c, session.as_deref(), limit))
            .await
    }

    async fn schedule_occurrences(&self, id: String, limit: i64) -> EngineResult<Vec<Occurrence>> {
        self.read_async(move |c| occurrences::list(c, &id, limit))
            .await
    }

    async fn schedule_cancel(&self, id: String, now: DateTime<Utc>) -> EngineResult<bool> {
        self.write_async(move |tx| schedules::cancel(tx, &id, now))
            .await
    }

    async fn schedule_disable(&self, id: String, now: DateTime<Utc>) -> EngineResult<bool> {
        self.write_async(move |tx| schedules::disable(tx, &id, now))
            .await
    }

    async fn schedule_enable_within_limit(&self, p: ScheduleEnable) -> EngineResult<Option<bool>> {
        self.write_async(move |tx| {
            if schedules::count_active(tx, &p.session)? >= p.max_active {
                return Ok(None);
            }
            schedules::enable(tx, &p.id, p.next, p.now).map(Some)
        })
        .await
    }

    async fn schedule_next_due(&self) -> EngineResult<Option<DateTime<Utc>>> {
        self.read_async(schedules::next_due).await
    }

    async fn schedule_claim_due(&self, p: ClaimDue, gate: GateRun) -> EngineResult<ClaimReport> {
        self.write_async(move |tx| schedules::claim_due(tx, &p, &gate))
            .await
    }

    async fn prune_count(&self, cutoffs: PruneCutoffs) -> EngineResult<Removed> {
        self.read_async(move |c| retention::count_prunable(c, &cutoffs))
            .await
    }

    async fn prune_batch(&self, p: PruneBatch) -> EngineResult<(Removed, RunsCursor)> {
        self.write_async(move |tx| {
            // A busy retry re-runs this closure: start from the same cursor.
            let mut cur = p.cursor.clone();
            let (c, batch) = (&p.cutoffs, p.batch);
            let removed = match TableStep::of(p.step) {
                None => retention::prune_runs_batch(tx, c, batch, &mut cur)?,
                Some(t) => t.removed(retention::prune_table_batch(tx, t, c, batch)?),
            };
            Ok((removed, cur))
        })
        .await
    }

    async fn stats_read(&self, now: DateTime<Utc>) -> EngineResult<StoreStats> {
        self.read_async(move |c| {
            Ok(StoreStats {
                by_state: runs::count_by_state(c)?,
                oldest_queued: runs::oldest_queued(c, now)?,
                busy_retries: workers::total_busy_retries(c)?,
                live_workers: workers::list(c, false)?.len(),
                waiting: runs::count_waiting(c)?,
            })
        })
        .await
    }

    async fn gauges_read(&self, now: DateTime<Utc>) -> EngineResult<Gauges> {
        self.read_async(move |c| {
            Ok(Gauges {
                by_state: runs::count_by_state(c)?,
                queue_depth: gauges::queue_depth(c)?,
                schedule_lag_secs: gauges::schedule_lag_secs(c, now)?,
            })
        })
        .await
    }

    async fn check(&self, quick: bool) -> EngineResult<Vec<String>> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.check(quick))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    async fn info(&self) -> EngineResult<DbInfo> {
        let store = self.clone();
        super::off_scheduler(move || store.info()).await
    }

    fn location(&self) -> String {
        self.path().display().to_string()
    }

    fn size_bytes(&self) -> Option<u64> {
        std::fs::metadata(self.path()).map(|m| m.len()).ok()
    }

    fn busy_retries(&self) -> u64 {
        Store::busy_retries(self)
    }

    fn write_stats(&self) -> WriteStats {
        Store::write_stats(self)
    }

    async fn wal_health(&self, warn_frames: i64) -> EngineResult<WalHealth> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.wal_health(warn_frames))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    fn wal_bytes(&self) -> u64 {
        Store::wal_bytes(self)
    }

    async fn checkpoint(&self, idle: bool) -> EngineResult<CheckpointTick> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.checkpoint_tick(idle))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    async fn change_feed(&self, on_change: OnChange, stop: CancellationToken) {
        use super::change_feed::{PROBE_EVERY, wake_loop};
        wake_loop(self.clone(), on_change, stop, PROBE_EVERY).await;
    }

    async fn message_feed(&self, on_change: OnChange, stop: CancellationToken) {
        use super::change_feed::{MESSAGE_PROBE_EVERY, wake_loop};
        wake_loop(self.clone(), on_change, stop, MESSAGE_PROBE_EVERY).await;
    }
}
