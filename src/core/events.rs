//! Events sent to runs (`toolq signal`, `Client::signal`, the dashboard): checked here, stored
//! by the engine, which wakes a run that waits for the event in the same transaction.

use serde::Serialize;
use serde_json::Value;

use super::Core;
use crate::error::{Error, InputError, Result};
use crate::ids::RunId;
use crate::run::{EventSent, NewEvent};

/// The longest event name.
pub const MAX_EVENT_NAME: usize = 200;

/// What sending an event did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Signalled {
    /// The run.
    pub run_id: RunId,
    /// The event's name.
    pub event: String,
    /// Whether the run was waiting for this event (it is due now); otherwise the event is
    /// kept until the run waits for it.
    pub woke: bool,
}

/// Checks an event name: 1 to [`MAX_EVENT_NAME`] characters, no control characters.
pub fn validate_event_name(name: &str) -> std::result::Result<(), InputError> {
    if name.is_empty() {
        return Err(InputError::new("event", name, "must not be empty"));
    }
    if name.chars().count() > MAX_EVENT_NAME {
        return Err(InputError::new(
            "event",
            name,
            format!("is longer than {MAX_EVENT_NAME} characters"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(InputError::new(
            "event",
            name,
            "must not contain control characters",
        ));
    }
    Ok(())
}

impl Core {
    /// Delivers the event `name` with `payload` to run `id`: stored; the first delivery of a
    /// name wins (a later one is an error naming the first); a run that waits for it is due
    /// at once; an event sent before the run waits is kept for its wait. Signalling a run
    /// that has ended is an error naming its state.
    pub async fn signal(
        &self,
        id: &RunId,
        name: &str,
        payload: Value,
        by: Option<String>,
    ) -> Result<Signalled> {
        validate_event_name(name)?;
        let text = serde_json::to_string(&payload)
            .map_err(|e| InputError::new("payload", "(not shown)", e.to_string()))?;
        let cap = self.config().runs.max_step_bytes;
        if text.len() > cap {
            return Err(InputError::new(
                "payload",
                format!("{} bytes", text.len()),
                format!("is larger than runs.max_step_bytes ({cap} bytes)"),
            )
            .into());
        }
        let sent = self
            .engine()
            .event_send(NewEvent {
                run: id.clone(),
                name: name.to_string(),
                payload: text,
                sent_by: by,
                now: self.now(),
            })
            .await?;
        match sent {
            EventSent::Stored { woke } => {
                if woke {
                    self.wake_workers();
                }
                Ok(Signalled {
                    run_id: id.clone(),
                    event: name.to_string(),
                    woke,
                })
            }
            EventSent::UnknownRun => Err(Error::NotFound {
                what: "run",
                id: id.to_string(),
            }),
            EventSent::Finished(state) => Err(Error::Conflict(format!(
                "run {id} is already {state}; events can only be sent to runs that have not ended"
            ))),
            EventSent::Duplicate(first) => Err(Error::Conflict(format!(
                "event {name:?} was already sent to run {id} at {}{}; the first delivery of a name wins",
                crate::clock::ts(first.sent_at),
                first
                    .sent_by
                    .map(|b| format!(" by {b}"))
                    .unwrap_or_default()
            ))),
        }
    }
}
