//! Batches and links in the core: creating a batch with its runs (validated like any
//! enqueue, its callback validated against its tool's schema), and reading batches and the
//! links between runs.

use serde::Serialize;
use serde_json::Value;

use super::Core;
use crate::error::{Error, InputError, Result};
use crate::ids::{BatchId, RunId, validate_session};
use crate::run::request::{EnqueueRequest, Enqueued};
use crate::run::{Batch, BatchFilter, Callback, Linked, LinkedResult, NewBatch, RunLinks};

/// The longest batch title.
const MAX_TITLE: usize = 500;

/// A batch to create ([`Core::create_batch`]).
#[derive(Debug, Clone)]
pub struct BatchRequest {
    /// The session that gets the batch's completion message (default "default").
    pub session: String,
    /// Its title (default: "batch of N runs").
    pub title: Option<String>,
    /// A run to enqueue when every run of the batch is final; it reads the batch's summary as
    /// its one parent result (`ctx.parent_results()`).
    pub on_complete: Option<OnComplete>,
}

impl Default for BatchRequest {
    fn default() -> Self {
        Self {
            session: "default".into(),
            title: None,
            on_complete: None,
        }
    }
}

impl BatchRequest {
    /// The session of every run of `reqs`, when they share one (a batch's message then goes
    /// where its runs' messages go); else `default`. The batch's session when none is given.
    pub fn common_session(reqs: &[EnqueueRequest]) -> String {
        match reqs.split_first() {
            Some((first, rest)) if rest.iter().all(|r| r.session == first.session) => {
                first.session.clone()
            }
            _ => "default".into(),
        }
    }
}

/// A batch's callback run (`--on-complete TOOL --args JSON`).
#[derive(Debug, Clone)]
pub struct OnComplete {
    /// The tool.
    pub tool: String,
    /// Its args (checked against the tool's schema when the batch is created).
    pub args: Value,
}

/// A created batch: its id and its runs.
#[derive(Debug, Clone, Serialize)]
pub struct BatchCreated {
    /// The batch's id.
    pub batch_id: BatchId,
    /// Its runs, in request order.
    pub runs: Vec<Enqueued>,
}

/// A created batch as `toolq enqueue --file F --batch --json` prints it and `POST /batches`
/// answers it: the batch's id, how many runs it holds, their ids and their enqueue answers,
/// in request order.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BatchEnqueued {
    /// The batch's id.
    pub batch_id: BatchId,
    /// How many runs were enqueued.
    pub enqueued: usize,
    /// Their ids, in request order.
    pub ids: Vec<RunId>,
    /// Their enqueue answers, in request order.
    pub runs: Vec<Enqueued>,
}

impl From<BatchCreated> for BatchEnqueued {
    fn from(done: BatchCreated) -> Self {
        Self {
            batch_id: done.batch_id,
            enqueued: done.runs.len(),
            ids: done.runs.iter().map(|e| e.run_id.clone()).collect(),
            runs: done.runs,
        }
    }
}

impl Core {
    /// Creates a batch of `reqs` in one transaction, or nothing: every request is validated
    /// first (an error names its index), the callback too, and a batch over
    /// `runs.max_batch_runs` is refused. When its last run is final, the batch's session
    /// gets exactly one `batch_completed` message and the callback run is enqueued, in the
    /// transaction of that end.
    pub async fn create_batch(
        &self,
        batch: BatchRequest,
        reqs: Vec<EnqueueRequest>,
    ) -> Result<BatchCreated> {
        validate_session(&batch.session)?;
        let max = self.config().runs.max_batch_runs;
        if reqs.is_empty() {
            return Err(
                InputError::new("batch", "0 runs", "a batch needs at least one run").into(),
            );
        }
        if reqs.len() > max {
            return Err(InputError::new(
                "batch",
                format!("{} runs", reqs.len()),
                format!("a batch holds at most {max} runs (runs.max_batch_runs)"),
            )
            .into());
        }
        let title = match batch.title {
            Some(t) if t.trim().is_empty() => {
                return Err(InputError::new("title", t, "must not be empty").into());
            }
            Some(t) if t.chars().count() > MAX_TITLE => {
                return Err(InputError::new(
                    "title",
                    format!("{} characters", t.chars().count()),
                    format!("must be at most {MAX_TITLE} characters"),
                )
                .into());
            }
            Some(t) => t,
            None => format!("batch of {} runs", reqs.len()),
        };
        let on_complete = batch
            .on_complete
            .map(|c| self.callback(c, &title))
            .transpose()?;
        let now = self.now();
        let id = BatchId::generate();
        let mut rows = self.prepare_many(reqs, now)?;
        for row in &mut rows {
            if row.batch_id.is_some() {
                return Err(InputError::new(
                    "batch",
                    row.batch_id
                        .as_ref()
                        .map(|b| b.as_str())
                        .unwrap_or_default(),
                    "a run of a new batch cannot also join another batch",
                )
                .into());
            }
            row.batch_id = Some(id.clone());
        }
        let new = NewBatch {
            id: id.clone(),
            session_id: batch.session,
            title,
            on_complete,
            created_at: now,
        };
        let inserted = self.engine().batch_insert(new, rows).await?;
        self.wake_workers();
        Ok(BatchCreated {
            batch_id: id,
            runs: inserted
                .into_iter()
                .map(super::enqueue::to_enqueued)
                .collect(),
        })
    }

    /// The callback of a batch titled `title`, validated as an enqueue of it would be.
    fn callback(&self, c: OnComplete, title: &str) -> Result<Callback, InputError> {
        self.registry()
            .validate(&c.tool, &c.args)
            .map_err(|e| e.within("--on-complete: "))?;
        let max_attempts = self.config().retry_policy(&c.tool).max_attempts;
        Ok(Callback {
            tool: c.tool,
            args: c.args,
            title: format!("on complete: {title}"),
            max_attempts,
            priority: 0,
        })
    }

    /// Reads a batch with its runs counted by state and its first failures.
    pub async fn batch(&self, id: &BatchId) -> Result<Batch> {
        self.engine()
            .batch_get(id.clone())
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "batch",
                id: id.to_string(),
            })
    }

    /// Lists batches, newest first.
    pub async fn batches(&self, filter: BatchFilter) -> Result<Vec<Batch>> {
        Ok(self.engine().batch_list(filter).await?)
    }

    /// A run's links: batch, parents, dependents, spawning run and children.
    pub async fn links(&self, id: &RunId) -> Result<RunLinks> {
        Ok(self.engine().run_links(id.clone()).await?)
    }

    /// The outcomes of a run's parents or of its children.
    pub async fn linked_results(&self, id: &RunId, which: Linked) -> Result<Vec<LinkedResult>> {
        Ok(self.engine().run_linked_results(id.clone(), which).await?)
    }
}
