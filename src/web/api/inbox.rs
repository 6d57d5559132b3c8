//! `/sessions/{id}/inbox`: a session's messages as `toolq inbox --json` gives them, a page
//! at a time; acknowledging them (`toolq inbox --ack`); and the stream of new ones as
//! Server-Sent Events, pushed when they commit.
//!
//! Listing has no side effect, as in the CLI: `toolq inbox` marks nothing read unless given
//! `--ack`, and the API's GETs (which the read token may call) change nothing either;
//! acknowledging is the POST.
//!
//! The stream sends each message once, in id order, and resumes after `Last-Event-ID`. That
//! takes ids that become visible in increasing order, so that a reader going forward from
//! the last id it sent can never later find a smaller one committed behind it:
//! - SQLite: one writer at a time, so ids (`AUTOINCREMENT`) are assigned in commit order;
//! - Postgres: every inbox insert first takes the transaction-scoped inbox lock
//!   (`store/postgres/locks.rs`, `INBOX`; taken in the same statement as the insert in
//!   `store/postgres/inbox.rs`, `insert_many` and `insert_batch_message`, the only inserts
//!   into `inbox`), held to the commit, so a transaction that draws a larger id commits
//!   after every one that drew a smaller one.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::ApiResult;
use super::body::{Body, Params, Segments};
use super::route::Route;
use crate::client::Client;
use crate::error::InputError;
use crate::ids::validate_session;
use crate::inbox::{InboxFilter, InboxPage, Message};
use crate::web::AppState;

/// How many messages a stream reads per query.
const STREAM_PAGE: i64 = 1000;
/// How many messages one acknowledgement `through` an id marks per statement.
const ACK_PAGE: i64 = 1000;
/// How often an idle stream sends a comment, so proxies and clients see it alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a stream waits before reading again after a failed read.
const RETRY_READ: Duration = Duration::from_secs(1);

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route::get("/sessions/{id}/inbox", "listInbox", page)
            .doc(
                "inbox",
                "A page of a session's messages",
                "The session's messages newest first, as `toolq inbox --json` lists them: the \
                 newest `limit`, those before `before` (older), or the `limit` right after \
                 `after` (newer). `unread` keeps only messages not yet acknowledged (the CLI's \
                 `--unread`). Listing marks nothing read or acknowledged. `next_before` and \
                 `next_after` are the ids to pass to read the next page back or forward.",
            )
            .param("id", "The session")
            .query::<PageQuery>()
            .ok::<InboxPageAnswer>(),
        Route::post("/sessions/{id}/inbox/ack", "ackInbox", ack)
            .doc(
                "inbox",
                "Acknowledge messages",
                "Acknowledges (and marks read) the messages listed in `ids`, and/or every \
                 message of the session with an id up to and including `through`, as `toolq \
                 inbox --ack` does for the messages it shows. Answers how many were newly \
                 acknowledged; messages already acknowledged, of another session, or unknown \
                 are left alone.",
            )
            .param("id", "The session")
            .body::<AckBody>()
            .ok::<AckAnswer>(),
        Route::get("/sessions/{id}/inbox/stream", "streamInbox", stream)
            .doc(
                "inbox",
                "Stream a session's new messages (Server-Sent Events)",
                "Each message, once it commits, as one event: `id` is the message id, `event` \
                 is `message`, `data` is the message as `toolq inbox --json` gives it (its \
                 `kind` says completed, failed, cancelled, approval_request, batch_completed). \
                 Messages come in id order, each once. The stream starts after the \
                 `Last-Event-ID` header's id (sent by EventSource when it reconnects), else \
                 after the `after` query parameter (`after=0`: every message), else after the \
                 session's newest message. Its first line is a comment naming that id. An idle \
                 stream sends a comment every 15 s.",
            )
            .param("id", "The session")
            .query::<StreamQuery>()
            .events::<Message>(),
    ]
}

/// The query string of `GET /sessions/{id}/inbox`: the flags of `toolq inbox`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    /// Only messages older than this message id (the next page back).
    before: Option<i64>,
    /// Only messages newer than this message id: the `limit` messages right after it.
    after: Option<i64>,
    /// At most this many (1 to 100000; default 100).
    limit: Option<i64>,
    /// Only messages not yet acknowledged.
    #[serde(default)]
    unread: bool,
}

/// A page of messages and where the next pages start.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct InboxPageAnswer {
    /// The messages, newest first (as `toolq inbox --json` prints them).
    messages: Vec<Message>,
    /// Pass as `before` for the next page back (older messages); null when there are none
    /// (this page was not full) or when this page was asked with `after`.
    next_before: Option<i64>,
    /// Pass as `after` for the messages newer than this page: the newest id in it (or the
    /// `after` given when it is empty); null when it is empty and no `after` was given.
    next_after: Option<i64>,
}

/// The body of `POST /sessions/{id}/inbox/ack`: ids, a bound, or both.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckBody {
    /// These messages.
    #[serde(default)]
    ids: Vec<i64>,
    /// Every message of the session whose id is at most this one.
    through: Option<i64>,
}

/// What an acknowledgement did.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct AckAnswer {
    /// How many messages were newly acknowledged.
    acknowledged: usize,
}

/// The query string of the stream.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamQuery {
    /// Start after this message id (0: every message); the `Last-Event-ID` header, when
    /// sent, wins. Without either, the stream starts after the session's newest message.
    after: Option<i64>,
}

/// Checks the session of the path (400 naming it).
fn session_of(id: &str) -> Result<(), InputError> {
    validate_session(id)
}

/// `id` as a message id: not negative.
fn message_id(field: &str, id: i64) -> Result<i64, InputError> {
    if id < 0 {
        return Err(InputError::new(
            field,
            id.to_string(),
            "must be a message id (0 or more)",
        ));
    }
    Ok(id)
}

async fn page(
    State(st): State<Arc<AppState>>,
    Segments(session): Segments<String>,
    Params(q): Params<PageQuery>,
) -> ApiResult<Json<InboxPageAnswer>> {
    session_of(&session)?;
    let before = q.before.map(|b| message_id("before", b)).transpose()?;
    let after = q.after.map(|a| message_id("after", a)).transpose()?;
    let limit = q.limit.unwrap_or(100);
    let messages = st
        .client
        .inbox_page(
            &session,
            InboxPage {
                after_id: after,
                before_id: before,
                unacked_only: q.unread,
                limit,
            },
        )
        .await?;
    // Newest first: the first is the newest, the last the oldest.
    let next_before = match (after, messages.last()) {
        (None, Some(oldest)) if messages.len() as i64 == limit => Some(oldest.id),
        _ => None,
    };
    let next_after = messages.first().map(|m| m.id).or(after);
    Ok(Json(InboxPageAnswer {
        messages,
        next_before,
        next_after,
    }))
}

async fn ack(
    State(st): State<Arc<AppState>>,
    Segments(session): Segments<String>,
    Body(b): Body<AckBody>,
) -> ApiResult<Json<AckAnswer>> {
    session_of(&session)?;
    for (i, id) in b.ids.iter().enumerate() {
        if *id < 1 {
            return Err(InputError::new(
                format!("ids[{i}]"),
                id.to_string(),
                "must be a message id (1 or more)",
            )
            .into());
        }
    }
    if let Some(t) = b.through {
        message_id("through", t)?;
    }
    if b.ids.is_empty() && b.through.is_none() {
        return Err(InputError::new(
            "ids",
            "[]",
            "give the ids to acknowledge, or `through` (acknowledge every message up to an id)",
        )
        .into());
    }
    let mut acknowledged = 0;
    if !b.ids.is_empty() {
        acknowledged += st.client.mark_inbox(&session, b.ids, true).await?;
    }
    if let Some(through) = b.through {
        acknowledged += ack_through(&st.client, &session, through).await?;
    }
    if acknowledged > 0 {
        st.api.feed.touch();
    }
    Ok(Json(AckAnswer { acknowledged }))
}

/// Acknowledges every unacknowledged message of `session` with an id up to `through`, a
/// page at a time. Ids are assigned in commit order (see the module's comment), so once
/// `through` names a committed message no smaller id can commit later.
async fn ack_through(client: &Client, session: &str, through: i64) -> crate::Result<usize> {
    let mut after_id = 0;
    let mut acknowledged = 0;
    loop {
        let msgs = client
            .inbox(
                session,
                InboxFilter {
                    after_id,
                    unacked_only: true,
                    limit: ACK_PAGE,
                },
            )
            .await?;
        let ids: Vec<i64> = msgs
            .iter()
            .map(|m| m.id)
            .take_while(|id| *id <= through)
            .collect();
        let done = ids.len() < msgs.len() || (msgs.len() as i64) < ACK_PAGE;
        if let Some(last) = ids.last() {
            after_id = *last;
            acknowledged += client.mark_inbox(session, ids, true).await?;
        }
        if done {
            return Ok(acknowledged);
        }
    }
}

/// Where a stream starts: `Last-Event-ID`, else `?after`, else the newest message.
async fn start_after(
    client: &Client,
    session: &str,
    headers: &HeaderMap,
    after: Option<i64>,
) -> ApiResult<i64> {
    if let Some(v) = headers.get("last-event-id") {
        let text = String::from_utf8_lossy(v.as_bytes()).trim().to_string();
        let id = text.parse::<i64>().map_err(|_| {
            InputError::new(
                "Last-Event-ID",
                &text,
                "must be a message id (the id of the last event received)",
            )
        })?;
        return Ok(message_id("Last-Event-ID", id)?);
    }
    if let Some(a) = after {
        return Ok(message_id("after", a)?);
    }
    let newest = client
        .inbox_page(
            session,
            InboxPage {
                limit: 1,
                ..InboxPage::default()
            },
        )
        .await?;
    Ok(newest.first().map_or(0, |m| m.id))
}

async fn stream(
    State(st): State<Arc<AppState>>,
    Segments(session): Segments<String>,
    Params(q): Params<StreamQuery>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    session_of(&session)?;
    let after = start_after(&st.client, &session, &headers, q.after).await?;
    // Subscribed before the first read: a message committed after it changes `rx`.
    let rx = st.api.feed.subscribe_inbox(&st.client);
    let cursor = Cursor {
        client: st.client.clone(),
        session,
        rx,
        after,
        pending: VecDeque::new(),
        opened: false,
        read: false,
        read_to: 0,
    };
    let closing = st.api.closing.clone();
    let events = futures_util::stream::unfold(cursor, move |mut c| {
        let closing = closing.clone();
        async move {
            tokio::select! {
                event = c.next() => Some((Ok(event), c)),
                // The server is shutting down: end the stream (a client resumes elsewhere
                // or later with Last-Event-ID).
                _ = closing.cancelled() => None,
            }
        }
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// One client's place in its session's inbox.
struct Cursor {
    client: Client,
    session: String,
    /// The inbox's mark (the newest message id of any session, or on Postgres a count of
    /// the feed's changes), grown soon after a message commits (the server's one shared
    /// feed; see `Feed::subscribe_inbox`).
    rx: watch::Receiver<i64>,
    /// The id of the last message sent (or the start).
    after: i64,
    /// Read, not yet sent.
    pending: VecDeque<Message>,
    /// Whether the opening comment was sent.
    opened: bool,
    /// Whether a read found nothing more, and the mark it covered.
    read: bool,
    read_to: i64,
}

impl Cursor {
    /// The next event: the opening comment, then each message after `after`, waiting on the
    /// feed when there is none. It reads its session's messages at its start and then only
    /// when the inbox's mark passed the one its last read covered.
    async fn next(&mut self) -> Event {
        if !self.opened {
            self.opened = true;
            return Event::default().comment(format!(
                "session {:?}, messages after {}",
                self.session, self.after
            ));
        }
        loop {
            if let Some(m) = self.pending.pop_front() {
                self.after = m.id;
                return message_event(&m);
            }
            // Mark the feed seen before reading: a message committed after this read
            // changes it again.
            let newest = *self.rx.borrow_and_update();
            if self.read && newest <= self.read_to {
                // Nothing new of any session since the last read.
                if self.rx.changed().await.is_err() {
                    // The feed is gone (the server's state is dropping): the closing
                    // token ends the stream.
                    std::future::pending::<()>().await;
                }
                continue;
            }
            let read = self
                .client
                .inbox(
                    &self.session,
                    InboxFilter {
                        after_id: self.after,
                        unacked_only: false,
                        limit: STREAM_PAGE,
                    },
                )
                .await;
            match read {
                Ok(msgs) if !msgs.is_empty() => {
                    self.pending.extend(msgs);
                    continue;
                }
                Ok(_) => {
                    // Every message the mark `newest` stands for was committed before this
                    // read began.
                    self.read = true;
                    self.read_to = newest;
                }
                Err(e) => {
                    tracing::warn!(error = %e, session = %self.session,
                        "inbox stream: reading messages failed; trying again");
                    tokio::time::sleep(RETRY_READ).await;
                }
            }
        }
    }
}

/// A message as an event: `id` its id, `event: message`, `data` its JSON (one line).
fn message_event(m: &Message) -> Event {
    let data = serde_json::to_string(m).unwrap_or_else(|_| "null".to_string());
    Event::default()
        .id(m.id.to_string())
        .event("message")
        .data(data)
}
