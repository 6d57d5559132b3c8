//! Long polls (`GET /runs/{id}/wait`, `GET /batches/{id}/wait`): hold the request until what
//! it waits for is done, its timeout passes or the server shuts down. The thing is re-read
//! only when the shared change feed reports a commit, and on a slow safety tick.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::{InputError, Result};
use crate::run::spec::parse_dur;
use crate::web::AppState;

/// A wait's length when the request names none.
const DEFAULT: Duration = Duration::from_secs(30);
/// The longest wait (a proxy between client and server may cut longer requests; the client
/// repeats the wait).
const MAX: Duration = Duration::from_secs(300);
/// A waiting request re-reads at least this often, even if the feed is quiet.
const TICK: Duration = Duration::from_secs(1);

/// The query of a wait.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitQuery {
    /// Answer after this long at the latest (`10s`, `2m`; default 30s, at most 5m).
    #[serde(default)]
    pub timeout: Option<String>,
}

impl WaitQuery {
    /// The wait's length: the default, or the `timeout` given (at most [`MAX`]).
    pub fn length(&self) -> Result<Duration, InputError> {
        let Some(t) = &self.timeout else {
            return Ok(DEFAULT);
        };
        let d = parse_dur("timeout", t)?;
        if d > MAX {
            return Err(InputError::new(
                "timeout",
                t,
                "is longer than the longest wait, 5m (wait again after it answers)",
            ));
        }
        Ok(d)
    }
}

/// Reads with `read` until it reports done, `length` passes or the server starts shutting
/// down; returns the last reading.
pub(super) async fn hold<T, F, Fut>(st: &AppState, length: Duration, mut read: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(T, bool)>>,
{
    let deadline = tokio::time::Instant::now() + length;
    // Subscribed before the first read: a commit between a read and the wait still wakes it.
    let mut changes = st.api.feed.subscribe(&st.client);
    loop {
        changes.borrow_and_update();
        let (value, done) = read().await?;
        let now = tokio::time::Instant::now();
        if done || now >= deadline || st.api.closing.is_cancelled() {
            return Ok(value);
        }
        let until = deadline.min(now + TICK);
        tokio::select! {
            woke = tokio::time::timeout_at(until, changes.changed()) => {
                if let Ok(Err(_)) = woke {
                    // The feed stopped: read on the tick alone.
                    tokio::time::sleep_until(until).await;
                }
            }
            // Shutting down: answer now with what was read last.
            () = st.api.closing.cancelled() => {}
        }
    }
}
