//! How an attempt ends, as data: the record the one end-writer
//! ([`crate::store::Engine::runs_end`]) writes in one fenced transaction.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::RunState;
use crate::ids::RunId;
use crate::inbox::NewMessage;

/// Where an attempt leaves its run.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A final state: completed, failed or cancelled.
    Final(RunState),
    /// Back to the queue for another attempt, not before this instant.
    Retry(DateTime<Utc>),
    /// Waiting for an operator (approval required).
    AwaitApproval {
        /// Optional deadline after which it expires.
        deadline: Option<DateTime<Utc>>,
    },
    /// Suspended: back to the queue without using an attempt or writing a message, due again
    /// at the suspension's `until` (or when its event arrives).
    Suspend(super::Suspension),
}

/// What fences an end: the write applies only while the run is still in the state the end
/// was decided from, so two ends of one attempt can never both apply.
#[derive(Debug, Clone, PartialEq)]
pub enum Fence {
    /// A running attempt, fenced by (id, attempt, lease token).
    Lease(String),
    /// A run that is not running (queued, or awaiting approval), fenced by (id, state,
    /// attempt). Its end counts as the next attempt (attempt + 1), so a retry and a second
    /// end of the same run never reuse an attempt's final message.
    Waiting(RunState),
}

/// An operator's decision recorded with an end (denied or expired approval).
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalMark {
    /// `denied` or `expired`.
    pub state: &'static str,
    /// Who decided.
    pub by: String,
    /// The reason given.
    pub note: Option<String>,
}

/// Everything one attempt writes when it ends, fenced by [`FinishRecord::fence`].
#[derive(Debug, Clone)]
pub struct FinishRecord {
    /// Run id.
    pub id: RunId,
    /// Owner session.
    pub session_id: String,
    /// The run's attempt as read (for a running run, the attempt that ends).
    pub attempt: i64,
    /// What the write is fenced by.
    pub fence: Fence,
    /// The new state.
    pub outcome: Outcome,
    /// Error shown to the session.
    pub error: Option<String>,
    /// Ops-only detail.
    pub internal_error: Option<String>,
    /// An entry for the run's `errors` history.
    pub error_entry: Option<Value>,
    /// Latest status line.
    pub status_text: Option<String>,
    /// Latest progress, JSON text.
    pub progress: Option<String>,
    /// Log tail, escaped.
    pub output_tail: Option<String>,
    /// The log: bytes and whether it was cut at its cap. `None` on a final state keeps the
    /// log written so far, or writes an empty one.
    pub log: Option<(Vec<u8>, bool)>,
    /// The result JSON (a final state always gets one; see `Engine::run_end`).
    pub result: Option<Vec<u8>>,
    /// Extra blobs (path, bytes), e.g. a raw output sidecar.
    pub extra_blobs: Vec<(String, Vec<u8>)>,
    /// The inbox message, when the run signals completion.
    pub message: Option<NewMessage>,
    /// The message's `data` as JSON text, encoded before the write transaction by
    /// [`FinishRecord::encode_message`]; `None`: the writer encodes it.
    pub message_data: Option<String>,
    /// An approval decision to record with the end.
    pub approval: Option<ApprovalMark>,
    /// Steps to record with the end, under the same fence, before its state change (a
    /// wait's record when it suspends; a resolved wait's record at the run's end).
    pub steps: Vec<super::StepEntry>,
    /// The run's batch (`runs.batch_id`, copied from the run by [`super::ending::blank`]:
    /// set at insert and never changed, so the end-writer needs no read to count the end).
    pub batch_id: Option<crate::ids::BatchId>,
    /// The run that spawned it (`runs.parent_run_id`, copied likewise): the end-writer wakes
    /// it if it waits for its children.
    pub parent_run_id: Option<crate::ids::RunId>,
}

impl FinishRecord {
    /// Encodes the message's structured data now, off the writer. Call it once the message
    /// is final (after a tool's formatter ran); the end-writer then inserts the text as is.
    pub fn encode_message(&mut self) {
        self.message_data = self.message.as_ref().map(|m| m.data.to_string());
    }
}
