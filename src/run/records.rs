//! What the store hands back about runs: filters, insert answers and blobs.

use super::RunState;
use crate::ids::RunId;

/// What `Engine::run_insert` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inserted {
    /// A new row was written.
    New(RunId),
    /// The idempotency key already existed: this is the existing run.
    Existing(RunId),
}

impl Inserted {
    /// The run id either way.
    pub fn id(&self) -> &RunId {
        match self {
            Inserted::New(id) | Inserted::Existing(id) => id,
        }
    }
}

/// Filters for `Engine::run_list`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this state.
    pub state: Option<RunState>,
    /// Only this session.
    pub session: Option<String>,
    /// Only this tool.
    pub tool: Option<String>,
    /// Only runs made by this schedule.
    pub schedule_id: Option<String>,
    /// At most this many (newest first).
    pub limit: i64,
}

/// A stored blob.
#[derive(Debug, Clone)]
pub struct Blob {
    /// Path.
    pub path: String,
    /// Raw bytes.
    pub content: Vec<u8>,
    /// Size in bytes.
    pub size: i64,
    /// Whether it was cut at its cap.
    pub truncated: bool,
    /// Last write.
    pub updated_at: String,
}
