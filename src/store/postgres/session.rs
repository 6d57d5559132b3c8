//! Settings that every connection of the engine starts with, so that a host that stalls (a
//! SIGSTOP, a frozen VM, a network partition) holds nothing that the other hosts wait on for
//! longer than a bound.
//!
//! A stalled process can be anywhere inside one of its transactions, holding row locks and
//! the transaction-scoped advisory locks of `locks.rs`. The server ends such a session once it
//! has sat idle in its transaction for [`IDLE_IN_TRANSACTION`]: the transaction rolls back and
//! its locks are free. No toolq transaction waits on anything but the server between two of
//! its statements, so a healthy one is never idle that long. [`LOCK_WAIT`] bounds every lock
//! wait behind a holder that is busy rather than idle; a wait that runs out is retried like a
//! serialization failure. A user's own `options` in the URL come after these and win.
//!
//! The pool's connections also plan each prepared statement once ([`PLAN_CACHE_MODE`]):
//! toolq's statements are few, prepared per connection, and run thousands of times a second.
//! Left to choose, the server planned the claim's session scan and heads again at every
//! call (1.3 s of planning per 20,000 runs, more CPU than running them), and a replanned
//! session scan with statistics from a moment when few runs were queued once ran 30 times
//! slower for a whole drain. A generic plan is made from the statement alone; the hot
//! statements name their states as literals, so their plans still use the partial indexes.

use std::time::Duration;

/// How long a session may sit idle inside a transaction before the server ends it.
pub(crate) const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(3);
/// How long one statement may wait for a lock.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(10);

/// How the pool's connections plan prepared statements (see the module's notes).
pub(crate) const PLAN_CACHE_MODE: &str = "force_generic_plan";

/// Which bounds a connection gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bounds {
    /// Both: every connection of the pool and the change feed's.
    All,
    /// The idle bound only: schema setup, whose migration lock may rightly be held for as
    /// long as another process's migration takes.
    IdleOnly,
}

/// The startup options for `bounds`, followed by the user's own (`options` in the URL).
pub(crate) fn options(bounds: Bounds, user: Option<&str>) -> String {
    let mut out = format!(
        "-c idle_in_transaction_session_timeout={}",
        IDLE_IN_TRANSACTION.as_millis()
    );
    if bounds == Bounds::All {
        out.push_str(&format!(" -c lock_timeout={}", LOCK_WAIT.as_millis()));
        out.push_str(&format!(" -c plan_cache_mode={PLAN_CACHE_MODE}"));
    }
    if let Some(user) = user.map(str::trim).filter(|u| !u.is_empty()) {
        out.push(' ');
        out.push_str(user);
    }
    out
}

/// Sets the startup options of `config` for `bounds`.
pub(crate) fn bound(config: &mut tokio_postgres::Config, bounds: Bounds) {
    let merged = options(bounds, config.get_options());
    config.options(merged);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_come_first_so_a_users_own_options_win() {
        assert_eq!(
            options(Bounds::All, None),
            "-c idle_in_transaction_session_timeout=3000 -c lock_timeout=10000 \
             -c plan_cache_mode=force_generic_plan"
        );
        assert_eq!(
            options(Bounds::IdleOnly, Some(" -c lock_timeout=0 ")),
            "-c idle_in_transaction_session_timeout=3000 -c lock_timeout=0"
        );
        assert_eq!(
            options(Bounds::All, Some("")),
            "-c idle_in_transaction_session_timeout=3000 -c lock_timeout=10000 \
             -c plan_cache_mode=force_generic_plan"
        );
    }
}
