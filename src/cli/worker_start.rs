//! A worker started while its Postgres server cannot be reached waits for it, as a running
//! worker waits out an outage: one ERROR line when the first attempt fails, retries with a
//! doubling backoff (1 s up to 30 s), one INFO line once the server answers. `--drain` gives
//! up after `worker.stall_timeout`, as during an outage; SIGINT/SIGTERM stop the wait. Only a
//! failure that may pass is waited out (the server down, starting, stopping or full, the
//! network): a refused login, a missing database or a bad schema still end the worker at
//! once.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::{Error, Fault, Result, StoreError};
use crate::store::OpenMode;
use crate::store::postgres::PgStore;

/// The first wait after a failed attempt; it doubles up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// The wait before attempt `n + 1` after `n` failed ones (`n` >= 1).
pub(crate) fn backoff(failures: u32) -> Duration {
    FIRST_WAIT
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
        .min(MAX_WAIT)
}

/// The Postgres URL `config` opens, if it opens Postgres.
fn postgres_url(config: &Config) -> Option<String> {
    config
        .db_url
        .clone()
        .or_else(|| crate::db_url::is_postgres(&config.db_path).then(|| config.db_path.clone()))
}

/// Returns once the database `config` names can be opened as `mode` allows (at once for a
/// SQLite file): `Ok(true)` to go on, `Ok(false)` when a signal asked to stop while
/// waiting. A failure that will not pass by waiting, or a draining worker's wait longer
/// than `worker.stall_timeout`, is returned.
pub(crate) async fn wait_for_database(
    config: &Config,
    mode: OpenMode,
    drain: bool,
) -> Result<bool> {
    let Some(url) = postgres_url(config) else {
        return Ok(true);
    };
    let location = crate::db_url::redact(&url);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::io("listen for SIGTERM", e))?;
    let started = Instant::now();
    let mut failures = 0u32;
    loop {
        let Some(e) = try_open(&url, mode).await? else {
            if failures > 0 {
                tracing::info!(
                    db = %location,
                    waited_secs = started.elapsed().as_secs(),
                    attempts = failures + 1,
                    "the database answers; starting"
                );
            }
            return Ok(true);
        };
        failures += 1;
        let wait = backoff(failures);
        if drain && started.elapsed() >= config.worker.stall_timeout {
            tracing::error!(
                db = %location,
                waited_secs = started.elapsed().as_secs(),
                "the database has not answered within worker.stall_timeout; giving up"
            );
            return Err(e.into());
        }
        log_failure(&location, &e, failures, wait);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = tokio::signal::ctrl_c() => return Ok(stopped(&location)),
            _ = term.recv() => return Ok(stopped(&location)),
        }
    }
}

/// One attempt to open the database: `None` once it opens, the error when it may pass by
/// waiting; any other error is returned.
async fn try_open(url: &str, mode: OpenMode) -> Result<Option<StoreError>> {
    let attempt = url.to_string();
    let opened = tokio::task::spawn_blocking(move || PgStore::open(&attempt, mode))
        .await
        .map_err(|e| StoreError::Task(format!("connecting to the database: {e}")))?;
    match opened {
        Ok(_) => Ok(None),
        Err(e) if e.fault() == Fault::Storage => Ok(Some(e)),
        Err(e) => Err(e.into()),
    }
}

/// The first failure is an ERROR that says what happens next; later ones only DEBUG lines.
fn log_failure(location: &str, e: &StoreError, failures: u32, wait: Duration) {
    if failures == 1 {
        tracing::error!(
            db = %location,
            error = %e,
            "cannot reach the database at start-up; retrying with a backoff of up to {}s, \
             and logging again once it answers",
            MAX_WAIT.as_secs()
        );
    } else {
        tracing::debug!(db = %location, error = %e, wait_secs = wait.as_secs(), "still cannot reach the database");
    }
}

fn stopped(location: &str) -> bool {
    tracing::info!(db = %location, "shutdown requested before the database answered; stopping");
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_one_second_up_to_thirty() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(backoff(u32::MAX), MAX_WAIT);
    }
}
