//! A run's output: `GET /runs/{id}/log` (a byte range), `GET /runs/{id}/log/stream` (a
//! follow as Server-Sent Events) and `GET /runs/{id}/result`.
//!
//! The follow sends `log` events whose `data` is `{"offset", "text"}` (the bytes from
//! `offset` as text; bytes that are not UTF-8 become U+FFFD) and whose `id` is the byte
//! offset after them, so `Last-Event-ID` (or `?offset=`) resumes where it stopped. A new
//! attempt writes a fresh log: the stream sends `reset` (`{"attempt"}`, id `0`) and starts
//! over. Once the run is final and its log sent, `end` (`{"state", "error", "size"}`) closes
//! it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{ID, run_id};
use crate::error::{Error, InputError};
use crate::ids::RunId;
use crate::run::{Run, RunState};
use crate::web::AppState;
use crate::web::api::body::{Params, Segments};
use crate::web::api::route::Route;
use crate::web::api::{ApiResult, Problem};

/// The most log bytes one event carries.
const CHUNK: usize = 64 << 10;
/// How often a follow re-reads a running run's log on Postgres, where a log append does not
/// notify (SQLite's change feed sees every commit).
const PG_TICK: Duration = Duration::from_millis(500);

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route::get("/runs/{id}/log", "getRunLog", log)
            .doc(
                "output",
                "Read a run's log",
                "The log's bytes from `offset` (default 0), at most `length` of them \
                 (default: to the end); a range past the end is empty. `text/plain; \
                 charset=utf-8` when the bytes are UTF-8, else `application/octet-stream`. \
                 Headers: `X-Log-Size` (the log's size so far), `X-Log-Truncated`, \
                 `X-Run-State`, `X-Run-Ended` (`true` once the run is final: the log is \
                 whole), `X-Run-Attempt`. A run with no log yet answers an empty body with \
                 `X-Log-Size: 0`.",
            )
            .param("id", ID)
            .query::<LogQuery>()
            .bytes("The log's bytes in the range asked for.")
            .errors(&[404]),
        Route::get("/runs/{id}/log/stream", "followRunLog", follow)
            .doc(
                "output",
                "Follow a run's log",
                "Server-Sent Events. `event: log` carries new bytes as `{\"offset\", \
                 \"text\"}` (whole lines while the run runs); its `id` is the byte offset \
                 after them: reconnect with `Last-Event-ID` (or `?offset=`) to resume. \
                 `event: reset` (`{\"attempt\"}`) says a new attempt started a fresh log, \
                 sent from offset 0 again. `event: end` (`{\"state\", \"error\", \"size\"}`) \
                 comes once the run is final and its whole log was sent; then the stream \
                 closes. Comments keep an idle connection alive.",
            )
            .param("id", ID)
            .query::<FollowQuery>()
            .events::<LogEvent>()
            .errors(&[404]),
        Route::get("/runs/{id}/result", "getRunResult", result)
            .doc(
                "output",
                "Get a run's result",
                "The result JSON the tool returned, as `toolq result --json` prints it. A \
                 run with no result yet is a 409 naming its state.",
            )
            .param("id", ID)
            .ok::<serde_json::Value>()
            .errors(&[404, 409]),
    ]
}

/// The byte range of `GET /runs/{id}/log`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogQuery {
    /// The first byte (default 0).
    pub offset: Option<u64>,
    /// At most this many bytes (default: to the end).
    pub length: Option<u64>,
}

/// Where `GET /runs/{id}/log/stream` starts.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FollowQuery {
    /// Start at this byte (default 0; a `Last-Event-ID` header wins).
    pub offset: Option<u64>,
}

/// The `data` of a log follow's events.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum LogEvent {
    /// `event: log`: new bytes.
    Chunk {
        /// The byte offset of the first of them.
        offset: u64,
        /// The bytes as text.
        text: String,
    },
    /// `event: reset`: a new attempt started a fresh log.
    Reset {
        /// The new attempt.
        attempt: i64,
    },
    /// `event: end`: the run is final and its whole log was sent.
    End {
        /// Its final state.
        state: RunState,
        /// Its error, if it did not complete.
        error: Option<String>,
        /// The log's size in bytes.
        size: u64,
    },
}

/// The headers that say how far a log is.
fn log_headers(run: &Run, size: usize, truncated: bool) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut put = |name: &'static str, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(HeaderName::from_static(name), v);
        }
    };
    put("x-log-size", size.to_string());
    put("x-log-truncated", truncated.to_string());
    put("x-run-state", run.state.to_string());
    put("x-run-ended", run.state.is_final().to_string());
    put("x-run-attempt", run.attempt.to_string());
    h
}

async fn log(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
    Params(q): Params<LogQuery>,
) -> ApiResult<Response> {
    let id = run_id(&id)?;
    let run = st.client.get(&id).await?;
    let (content, truncated) = match st.client.log(&run).await? {
        Some(b) => (b.content, b.truncated),
        None => (Vec::new(), false),
    };
    let size = content.len();
    let start = usize::try_from(q.offset.unwrap_or(0))
        .unwrap_or(usize::MAX)
        .min(size);
    let end = match q.length {
        None => size,
        Some(n) => start
            .saturating_add(usize::try_from(n).unwrap_or(usize::MAX))
            .min(size),
    };
    let bytes = content[start..end].to_vec();
    let kind = if std::str::from_utf8(&bytes).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    let mut headers = log_headers(&run, size, truncated);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    Ok((StatusCode::OK, headers, bytes).into_response())
}

async fn result(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
) -> ApiResult<Response> {
    let id = run_id(&id)?;
    let run = st.client.get(&id).await?;
    let Some(blob) = st.client.result(&run).await? else {
        return Err(
            Error::Conflict(format!("run {id} has no result yet (state {})", run.state)).into(),
        );
    };
    let kind = if serde_json::from_slice::<serde_json::Value>(&blob.content).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static(kind))],
        blob.content,
    )
        .into_response())
}

async fn follow(
    State(st): State<Arc<AppState>>,
    Segments(id): Segments<String>,
    Params(q): Params<FollowQuery>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>>> {
    let id = run_id(&id)?;
    let from = match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                InputError::new(
                    "Last-Event-ID",
                    String::from_utf8_lossy(v.as_bytes()),
                    "is not a byte offset (give the id of the last event received)",
                )
            })?,
        None => q.offset.unwrap_or(0),
    };
    // Unknown runs fail before the stream starts (a 404, not an event).
    st.client.get(&id).await?;
    let changes = st.api.feed.subscribe(&st.client);
    let tick = st.client.is_postgres().then_some(PG_TICK);
    let f = Follow {
        st,
        id,
        sent: usize::try_from(from).unwrap_or(usize::MAX),
        attempt: None,
        changes,
        tick,
        out: VecDeque::new(),
        done: false,
    };
    let stream = futures_util::stream::unfold(f, |mut f| async move {
        loop {
            if let Some(ev) = f.out.pop_front() {
                return Some((Ok(ev), f));
            }
            if f.done {
                return None;
            }
            f.step().await;
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// One follow's place in the log.
struct Follow {
    st: Arc<AppState>,
    id: RunId,
    /// Bytes of the current attempt's log sent so far.
    sent: usize,
    /// The attempt whose log is being sent (known after the first read).
    attempt: Option<i64>,
    changes: watch::Receiver<u64>,
    /// The re-read interval while nothing notifies (Postgres), if any.
    tick: Option<Duration>,
    /// Events to send before reading again.
    out: VecDeque<Event>,
    done: bool,
}

impl Follow {
    /// Reads the run and its log once: queues what is new, or waits for a change.
    async fn step(&mut self) {
        self.changes.borrow_and_update();
        let read = async {
            let run = self.st.client.get(&self.id).await?;
            let log = self.st.client.log(&run).await?;
            Ok::<_, Error>((run, log.map(|b| b.content).unwrap_or_default()))
        };
        let (run, content) = match read.await {
            Ok(x) => x,
            Err(e) => {
                let p = Problem::from(&e);
                self.push("error", &serde_json::json!(p), None);
                self.done = true;
                return;
            }
        };
        if self.attempt.is_some_and(|a| a != run.attempt) || content.len() < self.sent {
            // A retry or rescue writes a fresh log: start over.
            self.sent = 0;
            self.push(
                "reset",
                &LogEvent::Reset {
                    attempt: run.attempt,
                },
                Some(0),
            );
        }
        self.attempt = Some(run.attempt);
        let finished = run.state.is_final();
        let sent_before = self.sent;
        while self.sent < content.len() {
            let new = &content[self.sent..];
            let piece = &new[..new.len().min(CHUNK)];
            // Whole lines while running (a character is never split between two reads);
            // a piece that fills a whole chunk goes anyway.
            let upto = match piece.iter().rposition(|b| *b == b'\n') {
                _ if finished && piece.len() == new.len() => piece.len(),
                Some(i) => i + 1,
                None if piece.len() == CHUNK => CHUNK,
                None => 0,
            };
            if upto == 0 {
                break;
            }
            let offset = self.sent as u64;
            self.sent += upto;
            let text = String::from_utf8_lossy(&piece[..upto]).into_owned();
            self.push(
                "log",
                &LogEvent::Chunk { offset, text },
                Some(self.sent as u64),
            );
        }
        if finished && self.sent >= content.len() {
            self.push(
                "end",
                &LogEvent::End {
                    state: run.state,
                    error: run.error.clone(),
                    size: content.len() as u64,
                },
                None,
            );
            self.done = true;
            return;
        }
        if self.sent != sent_before || !self.out.is_empty() {
            return;
        }
        let wait = async {
            match self.tick {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let closing = self.st.api.closing.clone();
        tokio::select! {
            changed = self.changes.changed() => {
                if changed.is_err() {
                    // No feed any more (shutting down): re-read slowly until the run ends.
                    tokio::time::sleep(PG_TICK).await;
                }
            }
            () = wait => {}
            // The server is shutting down: end the stream (the client resumes elsewhere
            // with Last-Event-ID), so the graceful shutdown does not wait for the run.
            () = closing.cancelled() => self.done = true,
        }
    }

    /// Queues an event named `name` with JSON `data` and, when given, `id`.
    fn push<T: Serialize>(&mut self, name: &str, data: &T, id: Option<u64>) {
        let mut ev = Event::default().event(name);
        if let Some(id) = id {
            ev = ev.id(id.to_string());
        }
        match ev.json_data(data) {
            Ok(ev) => self.out.push_back(ev),
            Err(e) => tracing::error!(error = %e, "could not encode a log event"),
        }
    }
}
