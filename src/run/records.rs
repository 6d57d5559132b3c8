//! What the store hands back about runs: filters, insert answers and blobs.

use chrono::{DateTime, Utc};

use super::{RunState, Tags};
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
    /// Only runs of this batch.
    pub batch_id: Option<String>,
    /// Only runs spawned by this run.
    pub parent_run_id: Option<String>,
    /// Only runs carrying every one of these tags (`runs --tag`), read through
    /// `run_tags_tag_idx`; newest id first then.
    pub tags: Tags,
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

/// Which runs a bulk cancel or retry acts on. Every set field must match; an empty `states`
/// means every state the operation can act on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only these states (empty: any the operation allows).
    pub states: Vec<RunState>,
    /// Only this tool.
    pub tool: Option<String>,
    /// Only this session.
    pub session: Option<String>,
    /// Only runs made by this schedule.
    pub schedule_id: Option<String>,
    /// Only runs created before this instant (`--older-than`).
    pub created_before: Option<DateTime<Utc>>,
    /// Only runs created after this instant (`--newer-than`).
    pub created_after: Option<DateTime<Utc>>,
    /// Only runs of this batch (`toolq batch cancel|retry`).
    pub batch_id: Option<String>,
    /// Only runs spawned by this run (its children; `GET /api/v1/runs?parent=`).
    pub parent_run_id: Option<String>,
    /// Only runs carrying every one of these tags (`--tag`, `?tag=`).
    pub tags: Tags,
}

impl RunFilter {
    /// Whether no field narrows it (a bulk call from the CLI must say `--all` then).
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
            && self.tool.is_none()
            && self.session.is_none()
            && self.schedule_id.is_none()
            && self.created_before.is_none()
            && self.created_after.is_none()
            && self.batch_id.is_none()
            && self.parent_run_id.is_none()
            && self.tags.is_empty()
    }
}
