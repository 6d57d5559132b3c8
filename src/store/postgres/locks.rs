//! Transaction-scoped advisory locks: what SQLite's single writer gives for free. Each is
//! held until its transaction ends, so a count and the write that depends on it cannot
//! interleave with another host's. None is held by every writer: claims lock their sessions
//! and limited tools ([`take_claim`]), message inserts their sessions' inboxes
//! ([`take_inbox`]), so hosts working on different sessions never wait on one another.

use deadpool_postgres::GenericClient;

use super::exec;
use crate::error::StoreError;

/// Inserts under a queue-wide limit (`run_insert_within_limit`).
pub(crate) const LIMITED_INSERT: i64 = 0x746f_6f6c_7102;
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

/// Takes the claim locks of `sessions` and `tools` until the transaction ends, waiting, all
/// in one statement in the order of their keys. A claim tries its sessions' locks first
/// ([`try_claim_sessions`]) and comes here only for what it must wait for: the first session
/// of its ranking when another claim holds every one (holding no other claim lock then),
/// and the tools with `max_running` or `rate` it may start (their running counts and rate
/// windows). Sessions are never waited for while a tool is held, so two claims never wait
/// on each other in a cycle.
pub(crate) async fn take_claim<C: GenericClient>(
    c: &C,
    sessions: &[String],
    tools: &[&str],
) -> Result<(), StoreError> {
    if sessions.is_empty() && tools.is_empty() {
        return Ok(());
    }
    exec(
        c,
        TAKE_CLAIM,
        &[&claim_names(sessions, tools)],
        "take claim locks",
    )
    .await?;
    Ok(())
}

/// The statement of [`take_claim`], its one parameter the [`claim_names`]. A volatile
/// function in the select list is evaluated after the sort, in its order.
pub(crate) const TAKE_CLAIM: &str = "SELECT pg_advisory_xact_lock(k) FROM \
     (SELECT DISTINCT hashtextextended(n, 0) AS k FROM unnest($1::text[]) AS n) s ORDER BY k";

/// The names of the claim locks of `sessions` and `tools`, as [`TAKE_CLAIM`] takes them.
pub(crate) fn claim_names(sessions: &[String], tools: &[&str]) -> Vec<String> {
    sessions
        .iter()
        .map(|s| format!("toolq:claim-session:{s}"))
        .chain(tools.iter().map(|t| format!("toolq:claim-tool:{t}")))
        .collect()
}

/// Takes the inbox lock of each of `sessions` until the transaction ends, in key order: a
/// transaction inserting messages holds its sessions' locks from the insert to its commit,
/// so a session's message ids become visible in increasing order; writers to other
/// sessions do not wait for it.
pub(crate) async fn take_inbox<C: GenericClient>(
    c: &C,
    sessions: &[&str],
) -> Result<(), StoreError> {
    if sessions.is_empty() {
        return Ok(());
    }
    exec(c, INBOX_LOCKS, &[&sessions], "take inbox locks").await?;
    Ok(())
}

/// The statement of [`take_inbox`]; also the first step of the message inserts, which
/// take their sessions' locks in the same round trip.
pub(crate) const INBOX_LOCKS: &str = "SELECT pg_advisory_xact_lock(k) FROM \
     (SELECT DISTINCT hashtextextended('toolq:inbox:' || n, 0) AS k FROM unnest($1::text[]) AS n) s \
     ORDER BY k";

/// Tries the claim locks of `sessions` in their order, without waiting, until it holds
/// `want` of them; the sessions it got, in that order. A session another claim holds is
/// serving that claim: this one passes it by.
pub(crate) async fn try_claim_sessions<C: GenericClient>(
    c: &C,
    sessions: &[String],
    want: usize,
) -> Result<Vec<String>, StoreError> {
    if sessions.is_empty() || want == 0 {
        return Ok(Vec::new());
    }
    let want = i64::try_from(want).unwrap_or(i64::MAX);
    // The executor pulls rows through the filter only until the limit has its rows, so no
    // lock past the last one wanted is taken.
    let rows = super::query(
        c,
        "SELECT n FROM unnest($1::text[]) AS u(n) \
         WHERE pg_try_advisory_xact_lock(hashtextextended('toolq:claim-session:' || n, 0)) \
         LIMIT $2",
        &[&sessions, &want],
        "try claim locks",
    )
    .await?;
    rows.iter().map(|r| super::get(r, 0)).collect()
}
