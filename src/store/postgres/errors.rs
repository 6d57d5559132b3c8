//! Postgres's errors as the store's: shown whole, classified by SQLSTATE class ([`Fault`]),
//! the pool's timeouts named, and the conflicts a write transaction retries.

use tokio_postgres::error::SqlState;

use super::{CONNECT_TIMEOUT, POOL_SIZE};
use crate::error::{EngineError, Fault, StoreError};

/// A tokio-postgres error shown whole: its own text ("error connecting to server") is
/// followed by its cause (the server's message, the I/O error). The server's message stands
/// alone: tokio-postgres's "db error" before it says nothing.
#[derive(Debug)]
pub(crate) struct PgError(pub(crate) tokio_postgres::Error);

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut source = std::error::Error::source(&self.0);
        if self.0.as_db_error().is_some()
            && let Some(s) = source
        {
            write!(f, "{s}")?;
            source = s.source();
        } else {
            write!(f, "{}", self.0)?;
        }
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

impl std::error::Error for PgError {}

impl StoreError {
    /// Wraps a tokio-postgres error with the action that failed.
    pub(crate) fn pg(action: impl Into<String>, source: tokio_postgres::Error) -> Self {
        let fault = pg_fault(&source);
        Self::Sqlite {
            action: action.into(),
            source: EngineError::new(PgError(source), fault),
        }
    }
}

/// Postgres's verdict on an error, by its SQLSTATE class: a lost or refused connection and
/// a server out of resources are storage faults (the worker backs off and keeps its tools
/// running); data the server reports corrupted is damage.
pub(crate) fn pg_fault(e: &tokio_postgres::Error) -> Fault {
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection closed, an I/O error, a timeout.
        return Fault::Storage;
    };
    let c = code.code();
    if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED {
        Fault::Damaged
    } else if c.starts_with("08")
        || c.starts_with("53")
        || c.starts_with("58")
        || c.starts_with("57P")
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
    {
        Fault::Storage
    } else {
        Fault::Other
    }
}

pub(super) fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    use deadpool_postgres::{PoolError, TimeoutType};
    // deadpool's own texts ("Timeout occurred while creating a new object") say neither
    // what was waited for nor for how long.
    let why = match &e {
        PoolError::Backend(_) => None,
        PoolError::Timeout(TimeoutType::Create) => Some(format!(
            "connect: no answer from the server within {}s",
            CONNECT_TIMEOUT.as_secs()
        )),
        PoolError::Timeout(TimeoutType::Wait) => Some(format!(
            "no free connection in time (all {POOL_SIZE} of this process's are in use)"
        )),
        PoolError::Timeout(TimeoutType::Recycle) => {
            Some("checking a pooled connection: no answer from the server".into())
        }
        other => Some(other.to_string()),
    };
    match (e, why) {
        (PoolError::Backend(e), _) => StoreError::pg("connect", e),
        (_, why) => StoreError::Pool(EngineError::new(
            std::io::Error::other(why.unwrap_or_default()),
            Fault::Storage,
        )),
    }
}

/// Whether a transaction failed only because another one got in its way (retry it).
pub(super) fn retryable(e: &StoreError) -> bool {
    let StoreError::Sqlite { source, .. } = e else {
        return false;
    };
    source
        .downcast_ref::<PgError>()
        .and_then(|e| e.0.code())
        .is_some_and(|c| {
            // A lock wait that ran out (`session::LOCK_WAIT`) is another transaction in the
            // way, for longer.
            *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::LOCK_NOT_AVAILABLE
        })
}
