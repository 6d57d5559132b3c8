//! Delivery that acts: which inbox messages a host should hand its session now, by each
//! message's delivery mode and whether the session is busy.

use super::Client;
use crate::error::Result;
use crate::ids::validate_session;
use crate::inbox::Message;

/// Whether the session is in the middle of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionActivity {
    /// Producing output: only `interrupt` messages are delivered.
    Busy,
    /// Waiting for input: `interrupt` and `when_idle` messages are delivered.
    Idle,
}

/// At most this many messages per call; the rest come with the next call.
const BATCH: i64 = 500;

impl Client {
    /// The unacknowledged messages to deliver to `session` now, oldest first: `interrupt`
    /// always, `when_idle` only when the session is idle. `silent` messages are never
    /// returned; this call acknowledges them (they stay readable in `inbox`). Acknowledge
    /// what you delivered with [`Client::mark_inbox`], or it is offered again.
    pub async fn deliverable(
        &self,
        session: &str,
        activity: SessionActivity,
    ) -> Result<Vec<Message>> {
        validate_session(session)?;
        let now = self.now();
        let modes: &'static [&'static str] = match activity {
            SessionActivity::Busy => &["interrupt"],
            SessionActivity::Idle => &["interrupt", "when_idle"],
        };
        Ok(self
            .engine()
            .inbox_deliverable(session.to_string(), modes, BATCH, now)
            .await?)
    }
}
