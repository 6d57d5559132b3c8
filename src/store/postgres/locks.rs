//! Transaction-scoped advisory locks: what SQLite's single writer gives for free. Each is
//! held until its transaction ends, so a count and the write that depends on it cannot
//! interleave with another host's.

use deadpool_postgres::GenericClient;

use super::exec;
use crate::error::StoreError;

/// Claims: the running counts per session and per tool, the rate windows and the claim's
/// writes are one critical section over all hosts.
pub(crate) const CLAIM: i64 = 0x746f_6f6c_7101;
/// Inserts under a queue-wide limit (`run_insert_within_limit`).
pub(crate) const LIMITED_INSERT: i64 = 0x746f_6f6c_7102;
/// Inbox ids: taken just before a transaction inserts messages, so ids become visible in
/// increasing order and a reader going forward from the last id it saw skips none.
pub(crate) const INBOX: i64 = 0x746f_6f6c_7103;
/// Schema setup and migrations.
pub(crate) const MIGRATE: i64 = 0x746f_6f6c_7104;

/// Takes the lock `key` until the transaction ends.
pub(crate) async fn take<C: GenericClient>(c: &C, key: i64) -> Result<(), StoreError> {
    exec(
        c,
        "SELECT pg_advisory_xact_lock($1)",
        &[&key],
        "take a lock",
    )
    .await?;
    Ok(())
}

/// Takes the lock named `name` (an idempotency key, a unique key, a session) until the
/// transaction ends; different names rarely share a lock.
pub(crate) async fn take_named<C: GenericClient>(
    c: &C,
    kind: &str,
    name: &str,
) -> Result<(), StoreError> {
    let name = format!("toolq:{kind}:{name}");
    exec(
        c,
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&name],
        "take a named lock",
    )
    .await?;
    Ok(())
}
