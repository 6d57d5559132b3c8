//! Durable runs, the tool's side: recorded steps ([`ToolContext::step`](super::ToolContext::step)),
//! durable sleeps and event waits that free the worker's slot. A run's journal replays what an
//! earlier invocation of the same run recorded: a recorded step returns its stored result
//! without running, a wait whose time came (or whose event arrived) returns at once.
//!
//! Composition is built on the same two things: spawning a child run is a recorded step
//! (`spawn#N`), and waiting for the children is a wait that suspends (kind `children`) whose
//! answer, the children's outcomes, is recorded (`children#N`).
//!
//! The guarantee: a step's closure runs again only if its worker died after the closure
//! finished and before its record committed. A record is committed (fenced by the run's
//! lease) before the run's next step runs, and with the attempt's end at the latest: `step`
//! hands the record to the worker's group commit and returns, and the next step waits for
//! that commit first, so no step ever runs on an earlier result that is not recorded.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::clock::SharedClock;
use crate::ids::RunId;
use crate::run::{
    Journal, Linked, LinkedResult, RunState, StepEntry, StepKind, StepRecord, StepStatus,
    Suspension, WaitKind, steps::far_future,
};
use crate::tool::{ChildRun, Refused, ToolHost};
use crate::trace::{Parent, Span, names};
use opentelemetry::KeyValue;

/// Why a recorded step (or a wait) could not give its result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    /// The step's own future returned this error (recorded; a replay in the same attempt
    /// returns it again, a later attempt runs the step again).
    #[error("step {name:?} failed: {error}")]
    Failed {
        /// The step.
        name: String,
        /// Its error.
        error: String,
    },
    /// A replay asked for the steps in another order than they were recorded.
    #[error(
        "step order changed: step {seq} was recorded as {recorded:?}, but the tool now asks for {asked:?}"
    )]
    OrderChanged {
        /// The place in the sequence.
        seq: i64,
        /// What was recorded there.
        recorded: String,
        /// What the tool asked for.
        asked: String,
    },
    /// The same step name twice in one run.
    #[error("step name {0:?} is used twice in this run; step names must be unique")]
    DuplicateName(String),
    /// The result is over `runs.max_step_bytes`.
    #[error(
        "step {name:?} returned {bytes} bytes of JSON; the limit (runs.max_step_bytes) is {cap}"
    )]
    TooLarge {
        /// The step.
        name: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        cap: usize,
    },
    /// The result could not be encoded, or a recorded one decoded as the asked type.
    #[error("step {name:?}: {error}")]
    Codec {
        /// The step.
        name: String,
        /// What went wrong.
        error: String,
    },
    /// The attempt lost its lease (rescued or cancelled elsewhere): nothing was recorded.
    #[error("the run's lease was lost; step {0:?} was not recorded")]
    LeaseLost(String),
    /// The journal could not be read or written.
    #[error("the run's journal could not be reached: {0}")]
    Store(String),
    /// Waiting (for an event, for children) and spawning children need a queued run (not
    /// an inline tool call); names the call.
    #[error("{0} needs a queued run; this call has none")]
    NoRun(String),
    /// A child run was refused: an unknown tool, args that do not match its schema, a replay
    /// that asks for another child than was spawned at its place.
    #[error("spawn_child({tool:?}) was refused: {error}")]
    Refused {
        /// The child's tool.
        tool: String,
        /// Why.
        error: String,
    },
}

impl StepError {
    /// The run's outcome for this error: a failed step or a store error is internal and
    /// retried; a changed order, a reused name, an oversized or undecodable result are the
    /// tool's own errors (visible, not retried: another attempt would do the same).
    pub fn into_outcome(self) -> super::ToolOutcome {
        match self {
            StepError::Failed { .. } | StepError::LeaseLost(_) | StepError::Store(_) => {
                super::ToolOutcome::Internal(self.to_string())
            }
            _ => super::ToolOutcome::ToolError(self.to_string()),
        }
    }
}

impl From<StepError> for super::ToolOutcome {
    fn from(e: StepError) -> Self {
        e.into_outcome()
    }
}

/// Where an attempt's journal reads and records: given by the worker that runs the attempt.
#[async_trait]
pub trait JournalStore: Send + Sync {
    /// The run's recorded steps and events.
    async fn load(&self) -> Result<Journal, String>;
    /// Hands `entries` to the writer, to record under the attempt's lease in order with the
    /// attempt's other writes (its end after them); the answer comes once they committed:
    /// `false` when the lease no longer held.
    fn submit(&self, entries: Vec<StepEntry>) -> Result<Committed, String>;
}

/// A submitted record's answer: true once committed, false when fenced out.
pub type Committed = tokio::sync::oneshot::Receiver<bool>;

/// A suspension the tool asked for, with the steps to record with it.
#[derive(Debug, Clone)]
pub struct SuspendRequest {
    /// What the run waits for and until when.
    pub suspension: Suspension,
    /// Steps to record in the same transaction (the wait's own record among them).
    pub steps: Vec<StepEntry>,
}

/// The worker's side of a suspension: set by the tool, taken by the worker, which then
/// drops the tool's future and records the suspension as the attempt's end.
#[derive(Debug, Clone, Default)]
pub struct SuspendSignal {
    slot: Arc<Mutex<Option<SuspendRequest>>>,
    notify: Arc<tokio::sync::Notify>,
}

impl SuspendSignal {
    fn request(&self, r: SuspendRequest) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(r);
        self.notify.notify_one();
    }

    /// Resolves with the first suspension asked for.
    pub async fn requested(&self) -> SuspendRequest {
        loop {
            let notified = self.notify.notified();
            if let Some(r) = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return r;
            }
            notified.await;
        }
    }
}

/// An attempt's journal. Cheap to clone; clones share one replay position. A context with
/// no run ([`Durable::none`]) records nothing: steps just run, sleeps just sleep.
#[derive(Clone, Default)]
pub struct Durable {
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("recording", &self.inner.is_some())
            .finish()
    }
}

struct Inner {
    store: Arc<dyn JournalStore>,
    suspend: SuspendSignal,
    clock: SharedClock,
    attempt: i64,
    max_step_bytes: usize,
    state: tokio::sync::Mutex<Replay>,
}

#[derive(Default)]
struct Replay {
    journal: Option<Journal>,
    next_seq: i64,
    names: HashSet<String>,
    sleeps: u32,
    /// Children spawned so far in this invocation (the `N` of `spawn#N`).
    spawns: u32,
    /// Waits for children so far in this invocation (the `N` of `children#N`).
    child_waits: u32,
    /// Resolved waits to record with the next write (a sleep whose time came).
    deferred: Vec<StepEntry>,
    /// The latest record handed to the writer and not known to be committed, with its step's
    /// name: the next step's closure waits for it.
    outstanding: Option<(String, Committed)>,
}

/// Where a step stands when the tool asks for it.
enum Slot {
    /// Not recorded yet: the step runs at `seq`.
    New(i64),
    /// Recorded at its place.
    Recorded(StepRecord),
}

impl Durable {
    /// A journal that records nothing (an inline call, a test's context).
    pub fn none() -> Durable {
        Durable { inner: None }
    }

    /// The journal of a run's attempt. `fresh`: the run cannot have recorded anything yet
    /// (its first attempt, not a resume), so its journal is not read.
    pub fn new(
        store: Arc<dyn JournalStore>,
        suspend: SuspendSignal,
        clock: SharedClock,
        attempt: i64,
        max_step_bytes: usize,
        fresh: bool,
    ) -> Durable {
        Durable {
            inner: Some(Arc::new(Inner {
                store,
                suspend,
                clock,
                attempt,
                max_step_bytes,
                state: tokio::sync::Mutex::new(Replay {
                    next_seq: 1,
                    journal: fresh.then(Journal::default),
                    ..Replay::default()
                }),
            })),
        }
    }

    /// Whether this journal records (the context belongs to a queued run).
    pub fn is_recording(&self) -> bool {
        self.inner.is_some()
    }

    /// Runs `fut` as the recorded step `name` (see [`super::ToolContext::step`]).
    pub async fn step<T, E, F>(&self, name: &str, fut: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        E: std::fmt::Display,
        F: Future<Output = Result<T, E>>,
    {
        let Some(inner) = &self.inner else {
            return fut.await.map_err(|e| StepError::Failed {
                name: name.to_string(),
                error: e.to_string(),
            });
        };
        let seq = {
            let mut st = inner.state.lock().await;
            match inner.slot(&mut st, name, StepKind::Step).await? {
                Slot::Recorded(rec) => match rec.status {
                    StepStatus::Done => return decode(name, rec.output.unwrap_or(Value::Null)),
                    StepStatus::Failed if rec.attempt == inner.attempt => {
                        return Err(StepError::Failed {
                            name: name.to_string(),
                            error: rec.error.unwrap_or_default(),
                        });
                    }
                    // Failed in an earlier attempt: this attempt is the retry, so it runs again.
                    _ => rec.seq,
                },
                Slot::New(seq) => seq,
            }
        };
        // The previous step's record commits before this step runs: no step acts on an
        // earlier result that a crash could still take back.
        inner.barrier().await?;
        let span = Span::start(names::STEP, Parent::Current, None, || {
            vec![
                KeyValue::new("step.name", name.to_string()),
                KeyValue::new("step.seq", seq),
            ]
        });
        // The lock is not held while the step runs: the step may report progress, or await
        // other work of the tool.
        let done = fut.await;
        if let Err(e) = &done {
            span.fail(|| e.to_string());
        }
        span.end();
        let (entry, result) = match done {
            Ok(v) => {
                let text = serde_json::to_string(&v).map_err(|e| StepError::Codec {
                    name: name.to_string(),
                    error: format!("its result cannot be encoded as JSON: {e}"),
                })?;
                if text.len() > inner.max_step_bytes {
                    return Err(StepError::TooLarge {
                        name: name.to_string(),
                        bytes: text.len(),
                        cap: inner.max_step_bytes,
                    });
                }
                (
                    entry(seq, name, StepKind::Step, StepStatus::Done, Some(text)),
                    Ok(v),
                )
            }
            Err(e) => {
                let error = e.to_string();
                let mut en = entry(seq, name, StepKind::Step, StepStatus::Failed, None);
                en.error = Some(error.clone());
                let err = StepError::Failed {
                    name: name.to_string(),
                    error,
                };
                (en, Err(err))
            }
        };
        inner.save(name, entry).await?;
        result
    }

    /// Waits until every record this attempt handed to the writer has committed (a tool that
    /// acts outside its steps on a step's result may call it first); an error names the step
    /// whose record was fenced out.
    pub async fn commit(&self) -> Result<(), StepError> {
        match &self.inner {
            Some(inner) => inner.barrier().await,
            None => Ok(()),
        }
    }

    /// Sleeps durably for `d` (see [`super::ToolContext::sleep`]).
    pub async fn sleep(&self, d: Duration) -> Result<(), StepError> {
        let Some(inner) = &self.inner else {
            tokio::time::sleep(d).await;
            return Ok(());
        };
        let until = crate::clock::saturating_add(
            inner.clock.now(),
            chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX),
        );
        self.sleep_until(until).await
    }

    /// Sleeps durably until `t` (see [`super::ToolContext::sleep_until`]).
    pub async fn sleep_until(&self, t: DateTime<Utc>) -> Result<(), StepError> {
        let Some(inner) = &self.inner else {
            let left = (t - chrono::Utc::now()).to_std().unwrap_or_default();
            tokio::time::sleep(left).await;
            return Ok(());
        };
        let mut st = inner.state.lock().await;
        st.sleeps += 1;
        let name = format!("sleep#{}", st.sleeps);
        let (seq, until, recorded) = match inner.slot(&mut st, &name, StepKind::Sleep).await? {
            Slot::Recorded(rec) if rec.status == StepStatus::Done => return Ok(()),
            Slot::Recorded(rec) => (rec.seq, rec.wake_at.unwrap_or(t), true),
            Slot::New(seq) => (seq, t, false),
        };
        let _span = wait_span("sleep", &name);
        if inner.clock.now() >= until {
            // Its time came: recorded as done with the next write, so the replay never
            // depends on the clock again.
            let mut done = entry(seq, &name, StepKind::Sleep, StepStatus::Done, None);
            done.wake_at = Some(until);
            st.deferred.push(done);
            return Ok(());
        }
        let mut steps = std::mem::take(&mut st.deferred);
        if !recorded {
            let mut wait = entry(seq, &name, StepKind::Sleep, StepStatus::Waiting, None);
            wait.wake_at = Some(until);
            steps.push(wait);
        }
        drop(st);
        inner.suspend(WaitKind::Sleep, None, until, steps).await
    }

    /// Waits durably for the event `name` (see [`super::ToolContext::wait_for_event`]).
    pub async fn wait_for_event(
        &self,
        event: &str,
        timeout: Duration,
    ) -> Result<Option<Value>, StepError> {
        let Some(inner) = &self.inner else {
            return Err(StepError::NoRun(format!("wait_for_event({event:?})")));
        };
        let name = format!("event:{event}");
        let mut st = inner.state.lock().await;
        let (seq, deadline, recorded) = match inner.slot(&mut st, &name, StepKind::Event).await? {
            Slot::Recorded(rec) if rec.status == StepStatus::Done => {
                let out = rec.output.unwrap_or(Value::Null);
                return Ok(out.get("event").cloned());
            }
            Slot::Recorded(rec) => (rec.seq, rec.wake_at, true),
            Slot::New(seq) => (seq, None, false),
        };
        let _span = wait_span("event", &name);
        let deadline = deadline.unwrap_or_else(|| {
            chrono::Duration::from_std(timeout)
                .ok()
                .map_or(far_future(), |t| {
                    crate::clock::saturating_add(inner.clock.now(), t).min(far_future())
                })
        });
        // The freshest events: one may have come since the journal was read.
        let journal = inner.store.load().await.map_err(StepError::Store)?;
        if let Some(ev) = journal.event(event) {
            let mut done = entry(
                seq,
                &name,
                StepKind::Event,
                StepStatus::Done,
                Some(json!({"event": ev.payload}).to_string()),
            );
            done.wake_at = Some(deadline);
            done.consumes = Some(event.to_string());
            let payload = ev.payload.clone();
            drop(st);
            inner.save(&name, done).await?;
            return Ok(Some(payload));
        }
        if inner.clock.now() >= deadline {
            let mut done = entry(
                seq,
                &name,
                StepKind::Event,
                StepStatus::Done,
                Some(json!({"timed_out": true}).to_string()),
            );
            done.wake_at = Some(deadline);
            drop(st);
            inner.save(&name, done).await?;
            return Ok(None);
        }
        let mut steps = std::mem::take(&mut st.deferred);
        if !recorded {
            let mut wait = entry(seq, &name, StepKind::Event, StepStatus::Waiting, None);
            wait.wake_at = Some(deadline);
            steps.push(wait);
        }
        drop(st);
        inner
            .suspend(WaitKind::Event, Some(event.to_string()), deadline, steps)
            .await
    }

    /// Starts a child run of `parent` (see [`super::ToolContext::spawn_child`]): the recorded
    /// step `spawn#N`, whose insert carries the key `toolq:{parent}:spawn:{N}`, so a replay
    /// after a crash between the insert and the record gets the same child back.
    pub async fn spawn_child(
        &self,
        host: &dyn ToolHost,
        parent: &RunId,
        session: &str,
        tool: &str,
        args: Value,
    ) -> Result<RunId, StepError> {
        let Some(inner) = &self.inner else {
            return Err(StepError::NoRun(format!("spawn_child({tool:?})")));
        };
        let refused = |error: String| StepError::Refused {
            tool: tool.to_string(),
            error,
        };
        // Checked before a number is taken: bad args record nothing.
        host.registry()
            .validate(tool, &args)
            .map_err(|e| refused(e.to_string()))?;
        let n = {
            let mut st = inner.state.lock().await;
            st.spawns += 1;
            st.spawns
        };
        let name = format!("spawn#{n}");
        let child = ChildRun {
            parent: parent.clone(),
            session: session.to_string(),
            tool: tool.to_string(),
            args,
            idempotency_key: format!("toolq:{parent}:spawn:{n}"),
        };
        let input_error = Mutex::new(None);
        let started = self
            .step(&name, async {
                match host.start_child(child).await {
                    Ok(id) => Ok(id),
                    Err(Refused::Input(e) | Refused::Limit(e)) => {
                        *input_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                        Err(e)
                    }
                    Err(Refused::Internal(e)) => Err(e.to_string()),
                }
            })
            .await;
        match (
            started,
            input_error.into_inner().unwrap_or_else(|p| p.into_inner()),
        ) {
            // Another attempt would be refused the same way: the tool's error, not retried.
            (Err(_), Some(e)) => Err(refused(e)),
            (r, _) => r,
        }
    }

    /// Waits for every child of `run` to end (see [`super::ToolContext::wait_children`]),
    /// at most `timeout` (`None`: no limit).
    pub async fn wait_children(
        &self,
        host: &dyn ToolHost,
        run: &RunId,
        timeout: Option<Duration>,
    ) -> Result<Vec<LinkedResult>, StepError> {
        let Some(inner) = &self.inner else {
            return Err(StepError::NoRun("wait_children()".to_string()));
        };
        let mut st = inner.state.lock().await;
        st.child_waits += 1;
        let name = format!("children#{}", st.child_waits);
        let (seq, deadline, recorded) = match inner.slot(&mut st, &name, StepKind::Children).await?
        {
            Slot::Recorded(rec) if rec.status == StepStatus::Done => {
                let out = rec.output.unwrap_or(Value::Null);
                return decode(&name, out.get("children").cloned().unwrap_or(Value::Null));
            }
            Slot::Recorded(rec) => (rec.seq, rec.wake_at, true),
            Slot::New(seq) => (seq, None, false),
        };
        let _span = wait_span("children", &name);
        let deadline = deadline.unwrap_or_else(|| match timeout {
            None => far_future(),
            Some(t) => chrono::Duration::from_std(t)
                .ok()
                .map_or(far_future(), |t| {
                    crate::clock::saturating_add(inner.clock.now(), t).min(far_future())
                }),
        });
        let children = host
            .linked_results(run, Linked::Children)
            .await
            .map_err(|e| StepError::Store(e.to_string()))?;
        let unfinished = children.iter().any(|c| !is_over(&c.state));
        if !unfinished || inner.clock.now() >= deadline {
            let out = json!({"children": children, "timed_out": unfinished}).to_string();
            if out.len() > inner.max_step_bytes {
                return Err(StepError::TooLarge {
                    name,
                    bytes: out.len(),
                    cap: inner.max_step_bytes,
                });
            }
            let mut done = entry(seq, &name, StepKind::Children, StepStatus::Done, Some(out));
            done.wake_at = Some(deadline);
            drop(st);
            inner.save(&name, done).await?;
            return Ok(children);
        }
        let mut steps = std::mem::take(&mut st.deferred);
        if !recorded {
            let mut wait = entry(seq, &name, StepKind::Children, StepStatus::Waiting, None);
            wait.wake_at = Some(deadline);
            steps.push(wait);
        }
        drop(st);
        // The store makes the run due once no child is unfinished, also when the last one
        // ended between the read above and this suspension's commit (checked in its
        // transaction), or at the deadline.
        inner
            .suspend(WaitKind::Children, None, deadline, steps)
            .await
    }

    /// Asks the worker to suspend the run (no step of its own): an async tool's next check.
    /// Never returns for a recording journal; `false` without one (the caller waits itself).
    pub async fn suspend_for(&self, kind: WaitKind, until: DateTime<Utc>) -> bool {
        let Some(inner) = &self.inner else {
            return false;
        };
        let steps = std::mem::take(&mut inner.state.lock().await.deferred);
        let _: Result<(), StepError> = inner.suspend(kind, None, until, steps).await;
        true
    }

    /// Resolved waits not yet written: the worker records them with the attempt's end.
    pub async fn take_deferred(&self) -> Vec<StepEntry> {
        match &self.inner {
            Some(inner) => std::mem::take(&mut inner.state.lock().await.deferred),
            None => Vec::new(),
        }
    }

    /// Same as [`Durable::take_deferred`], for a caller that cannot await: empty if the
    /// journal is busy (a step is being recorded, so the attempt is not ending).
    pub fn try_take_deferred(&self) -> Vec<StepEntry> {
        match &self.inner {
            Some(inner) => inner
                .state
                .try_lock()
                .map(|mut st| std::mem::take(&mut st.deferred))
                .unwrap_or_default(),
            None => Vec::new(),
        }
    }
}

impl Inner {
    /// The next place in the sequence for `name`: recorded there already, or new. Errors on
    /// a name used twice and on a replay that asks for another step than was recorded.
    async fn slot(&self, st: &mut Replay, name: &str, kind: StepKind) -> Result<Slot, StepError> {
        if st.journal.is_none() {
            st.journal = Some(self.store.load().await.map_err(StepError::Store)?);
        }
        if !st.names.insert(name.to_string()) {
            return Err(StepError::DuplicateName(name.to_string()));
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let recorded = st
            .journal
            .as_ref()
            .and_then(|j| j.steps.iter().find(|s| s.seq == seq));
        match recorded {
            None => Ok(Slot::New(seq)),
            Some(rec) if rec.name == name && rec.kind == kind => Ok(Slot::Recorded(rec.clone())),
            Some(rec) => Err(StepError::OrderChanged {
                seq,
                recorded: rec.name.clone(),
                asked: name.to_string(),
            }),
        }
    }

    /// Hands `entry` (after any deferred ones) to the writer; the next step waits for its
    /// commit ([`Inner::barrier`]).
    async fn save(&self, name: &str, entry: StepEntry) -> Result<(), StepError> {
        let mut st = self.state.lock().await;
        let mut entries = std::mem::take(&mut st.deferred);
        entries.push(entry);
        let committed = self.store.submit(entries).map_err(StepError::Store)?;
        // Records commit in the order they were handed over, so the latest answer covers
        // the earlier ones (their lease is the same).
        st.outstanding = Some((name.to_string(), committed));
        Ok(())
    }

    /// Waits for the latest record handed to the writer to commit.
    async fn barrier(&self) -> Result<(), StepError> {
        let Some((name, committed)) = self.state.lock().await.outstanding.take() else {
            return Ok(());
        };
        match committed.await {
            Ok(true) => Ok(()),
            Ok(false) => Err(StepError::LeaseLost(name)),
            Err(_) => Err(StepError::Store(format!(
                "the worker stopped before step {name:?} was recorded"
            ))),
        }
    }

    /// Hands the suspension to the worker and waits until the worker drops this future.
    async fn suspend<T>(
        &self,
        kind: WaitKind,
        event: Option<String>,
        until: DateTime<Utc>,
        steps: Vec<StepEntry>,
    ) -> Result<T, StepError> {
        self.suspend.request(SuspendRequest {
            suspension: Suspension { kind, event, until },
            steps,
        });
        std::future::pending().await
    }
}

/// The `toolq.wait` span of a wait this invocation reached: it ends when the wait resolves
/// (the caller's return) or when the worker drops the suspended tool.
fn wait_span(kind: &'static str, name: &str) -> Span {
    Span::start(names::WAIT, Parent::Current, None, || {
        vec![
            KeyValue::new("wait.kind", kind),
            KeyValue::new("wait.name", name.to_string()),
        ]
    })
}

fn entry(
    seq: i64,
    name: &str,
    kind: StepKind,
    status: StepStatus,
    output: Option<String>,
) -> StepEntry {
    StepEntry {
        seq,
        name: name.to_string(),
        kind,
        status,
        output,
        error: None,
        wake_at: None,
        consumes: None,
    }
}

/// Whether a linked run is over: final, or pruned since (retention keeps only ended runs).
fn is_over(state: &str) -> bool {
    state.parse::<RunState>().map_or(true, |s| s.is_final())
}

fn decode<T: DeserializeOwned>(name: &str, v: Value) -> Result<T, StepError> {
    serde_json::from_value(v).map_err(|e| StepError::Codec {
        name: name.to_string(),
        error: format!("its recorded result does not decode as the type asked for: {e}"),
    })
}
