//! Many sessions (toolq's own, issue 38): `enqueue-sessions` enqueues `count` runs spread
//! round-robin over [`SESSIONS`] sessions on a fresh database (run `i` in session `i % 50`),
//! 1,000 per `enqueue_batch` call as `enqueue-batch` does for one session; `drain-sessions`
//! (the default per-session limit, 5) and `drain-sessions-64` (64) seed that in a child
//! process and time its drain by one worker, as `drain` times the one-session drain.

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use crate::durable::child;
use crate::throughput::{drain_tuned, round};
use crate::{Noop, Recorder, Tune, fresh, open, request, with_info};

/// The sessions the runs are spread over.
pub const SESSIONS: usize = 50;

/// Runs per `enqueue_batch` call.
const CHUNK: usize = 1000;

/// The session of run `i`.
fn session(i: usize) -> String {
    format!("session-{:02}", i % SESSIONS)
}

/// `enqueue-sessions`: `n` runs over [`SESSIONS`] sessions on a fresh database, in 1,000-run
/// calls.
pub async fn enqueue(db: &Path, n: usize) -> anyhow::Result<Value> {
    fresh(db).await?;
    let client = open(db, 1, Recorder::counting())?;
    let started = Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + CHUNK).min(n);
        let reqs = (i..end).map(|k| request(k).session(session(k))).collect();
        client.enqueue_batch(reqs).await?;
        i = end;
    }
    let secs = started.elapsed().as_secs_f64();
    let v = json!({
        "mode": "enqueue-sessions", "n": n, "sessions": SESSIONS, "batch": CHUNK,
        "secs": round(secs, 4), "rate": round(n as f64 / secs, 1),
    });
    with_info(&client, v).await
}

/// `drain-sessions` (`per_session` `None`: the default limit) and `drain-sessions-64`: seeds
/// with `enqueue-sessions` in a child process, then drains in this one.
pub async fn drain(
    db: &Path,
    n: usize,
    concurrency: usize,
    per_session: Option<i64>,
) -> anyhow::Result<Value> {
    let seed = child("enqueue-sessions", db, n, concurrency).await?;
    eprintln!("seeded: {seed}");
    let mode = match per_session {
        None => "drain-sessions".to_string(),
        Some(k) => format!("drain-sessions-{k}"),
    };
    let recorder = Recorder::counting();
    let tune = Tune {
        limited: false,
        per_session,
    };
    let tool = Noop(recorder.clone());
    let mut v = drain_tuned(db, (n, concurrency), tune, &mode, recorder, tool).await?;
    let limit = per_session.unwrap_or(toolq::Config::default().worker.per_session);
    v["sessions"] = json!(SESSIONS);
    v["per_session"] = json!(limit);
    Ok(v)
}
