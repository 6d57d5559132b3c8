//! Delivery that acts: which inbox messages a host should hand its session now, by each
//! message's delivery mode and whether the session is busy.

use super::Client;
use crate::error::Result;
use crate::ids::validate_session;
use crate::inbox::Message;

/// Whether the session is in the middle of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionActivity {
    /// Producing output: `interrupt` messages are delivered (and `silent` ones, which add
    /// context without starting a turn).
    Busy,
    /// Waiting for input: `interrupt`, `when_idle` and `silent` messages are delivered.
    Idle,
}

/// At most this many messages per call; the rest come with the next call.
const BATCH: i64 = 500;

impl Client {
    /// The unacknowledged messages to deliver to `session` now, oldest first: `interrupt` and
    /// `silent` always, `when_idle` only when the session is idle. A silent message
    /// ([`Message::is_silent`]) goes into the model's context without starting a turn or
    /// notifying the user (the seed's `Silent`). This call only reads: acknowledge what you
    /// delivered, silent messages included, with [`Client::mark_inbox`], or it is offered
    /// again.
    pub async fn deliverable(
        &self,
        session: &str,
        activity: SessionActivity,
    ) -> Result<Vec<Message>> {
        validate_session(session)?;
        let modes: &'static [&'static str] = match activity {
            SessionActivity::Busy => &["interrupt", "silent"],
            SessionActivity::Idle => &["interrupt", "when_idle", "silent"],
        };
        Ok(self
            .engine()
            .inbox_deliverable(session.to_string(), modes, BATCH)
            .await?)
    }
}
