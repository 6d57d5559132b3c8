//! One operation: a page of a session's inbox, newest first, by keyset on the message id, so
//! a busy session's newest messages are one call away and older (or newer) pages follow
//! without gaps or repeats however many messages arrive meanwhile.

use rusqlite::named_params;

use super::Ctx;
use super::inbox::message_row;
use crate::error::StoreError;
use crate::inbox::{InboxPage, Message};

/// A page of `session`'s messages, newest first. Without `after_id` it is the newest
/// messages (below `before_id` if given); with `after_id` it is the messages right after
/// that id, so paging forward from a known id misses nothing.
pub fn inbox_page(
    conn: &rusqlite::Connection,
    session: &str,
    p: &InboxPage,
) -> Result<Vec<Message>, StoreError> {
    // Both directions walk inbox_session_idx (session_id, id); the order decides which end of
    // the range the LIMIT keeps.
    let sql = if p.after_id.is_some() {
        "SELECT id, session_id, run_id, kind, body, data, delivery, created_at, read_at, acked_at \
         FROM inbox WHERE session_id = :session AND id > :after AND id < :before \
         AND (:unacked = 0 OR acked_at IS NULL) ORDER BY id ASC LIMIT :limit"
    } else {
        "SELECT id, session_id, run_id, kind, body, data, delivery, created_at, read_at, acked_at \
         FROM inbox WHERE session_id = :session AND id > :after AND id < :before \
         AND (:unacked = 0 OR acked_at IS NULL) ORDER BY id DESC LIMIT :limit"
    };
    let mut stmt = conn.prepare_cached(sql).ctx("prepare inbox page")?;
    let rows = stmt
        .query_map(
            named_params! {
                ":session": session,
                ":after": p.after_id.unwrap_or(0),
                ":before": p.before_id.unwrap_or(i64::MAX),
                ":unacked": p.unacked_only as i64,
                ":limit": p.limit,
            },
            message_row,
        )
        .ctx("inbox page")?;
    let mut page: Vec<Message> = rows.collect::<Result<_, _>>().ctx("read inbox page")?;
    if p.after_id.is_some() {
        page.reverse();
    }
    Ok(page)
}
