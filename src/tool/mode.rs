//! How a tool runs when a host calls it through the [`crate::tool::BasicToolExecutor`]:
//! inline ([`ToolExecutionMode::Standard`]) or through the queue
//! ([`ToolExecutionMode::Background`]), with a [`ResultFormatter`] for the texts the session
//! sees and a scheduling that becomes the run's inbox [`Delivery`].

use std::sync::Arc;

use serde_json::{Value, json};

use crate::ids::RunId;
use crate::inbox::NewMessage;
use crate::run::{Delivery, artifact_dir, log_path, result_path};

/// What a background call answers at once, before the run executes.
#[derive(Debug, Clone)]
pub struct Acknowledgement {
    /// The queued run.
    pub run_id: RunId,
    /// Its title.
    pub title: String,
    /// Its tool.
    pub tool: String,
    /// Whether the session gets a message when it ends.
    pub signal_on_completion: bool,
}

impl Acknowledgement {
    /// The seed's reply: run and resource id, status "running", title, tool,
    /// signal_on_completion and the artifact paths.
    pub fn default_value(&self) -> Value {
        json!({
            "run_id": self.run_id,
            "resource_id": self.run_id,
            "status": "running",
            "title": self.title,
            "tool": self.tool,
            "signal_on_completion": self.signal_on_completion,
            "artifact_dir": artifact_dir(&self.run_id),
            "log_path": log_path(&self.run_id),
            "result_path": result_path(&self.run_id),
        })
    }
}

/// Shapes what a session sees of a background tool: the acknowledgement, the result message
/// (completed or failed) and the cancellation message. Every method defaults to today's text;
/// override only what you want to change. The message's structured data and delivery stay.
pub trait ResultFormatter: Send + Sync {
    /// The immediate answer to the call.
    fn acknowledgement(&self, ack: &Acknowledgement) -> Value {
        ack.default_value()
    }

    /// The text of a `completed` or `failed` message; `draft.body` holds the default.
    fn result(&self, draft: &NewMessage) -> String {
        draft.body.clone()
    }

    /// The text of a `cancelled` message; `draft.body` holds the default.
    fn cancellation(&self, draft: &NewMessage) -> String {
        draft.body.clone()
    }
}

/// Today's texts (the seed's "Background run completed." format).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultResultFormatter;

impl ResultFormatter for DefaultResultFormatter {}

/// How the model should take a background result; stored as the run's [`Delivery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FunctionResponseScheduling {
    /// Announce at once, even while the session is busy.
    Interrupt,
    /// Announce when the session is idle (the default).
    #[default]
    WhenIdle,
    /// Never announce; the message stays readable in history.
    Silent,
}

impl From<FunctionResponseScheduling> for Delivery {
    fn from(s: FunctionResponseScheduling) -> Delivery {
        match s {
            FunctionResponseScheduling::Interrupt => Delivery::Interrupt,
            FunctionResponseScheduling::WhenIdle => Delivery::WhenIdle,
            FunctionResponseScheduling::Silent => Delivery::Silent,
        }
    }
}

/// Whether a host's call runs inline or through the queue.
#[derive(Clone, Default)]
pub enum ToolExecutionMode {
    /// Runs inline: the call returns the tool's outcome.
    #[default]
    Standard,
    /// Runs through the queue: the call returns an acknowledgement at once and the result
    /// arrives in the session's inbox.
    Background {
        /// Shapes the texts; `None` uses [`DefaultResultFormatter`].
        formatter: Option<Arc<dyn ResultFormatter>>,
        /// How the result is delivered; `None` is `WhenIdle`.
        scheduling: Option<FunctionResponseScheduling>,
    },
}

impl std::fmt::Debug for ToolExecutionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolExecutionMode::Standard => f.write_str("Standard"),
            ToolExecutionMode::Background {
                formatter,
                scheduling,
            } => f
                .debug_struct("Background")
                .field("custom_formatter", &formatter.is_some())
                .field("scheduling", scheduling)
                .finish(),
        }
    }
}

impl ToolExecutionMode {
    /// Background with the default formatter and `scheduling`.
    pub fn background(scheduling: FunctionResponseScheduling) -> Self {
        ToolExecutionMode::Background {
            formatter: None,
            scheduling: Some(scheduling),
        }
    }

    /// Whether calls go through the queue.
    pub fn is_background(&self) -> bool {
        matches!(self, ToolExecutionMode::Background { .. })
    }

    /// The inbox delivery of this tool's runs (`WhenIdle` unless set).
    pub fn delivery(&self) -> Delivery {
        match self {
            ToolExecutionMode::Background {
                scheduling: Some(s),
                ..
            } => (*s).into(),
            _ => Delivery::WhenIdle,
        }
    }

    /// The formatter, when one is set.
    pub fn formatter(&self) -> Option<&Arc<dyn ResultFormatter>> {
        match self {
            ToolExecutionMode::Background {
                formatter: Some(f), ..
            } => Some(f),
            _ => None,
        }
    }
}
