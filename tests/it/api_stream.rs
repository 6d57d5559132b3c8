//! The inbox over HTTP (`/api/v1/sessions/{id}/inbox`): a page, acknowledging, and the
//! stream of pushed messages (Server-Sent Events) with `Last-Event-ID` resumption, on a real
//! `toolq web` process with a real worker process. Also the enqueue load test (50 concurrent
//! clients), which needs `POST /runs`.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::api::Api;
use crate::support::{ENGINE, Killed, wait_until};
use crate::web::Site;

/// One Server-Sent Event (comments skipped).
#[derive(Debug)]
struct Event {
    id: Option<String>,
    event: Option<String>,
    data: String,
}

/// A minimal SSE client: reads events off a streaming response body, line by line.
struct SseClient {
    lines: BufReader<Box<dyn Read + Send>>,
}

impl SseClient {
    /// Opens the stream of `session` with `query` ("" or "?after=N") and `Last-Event-ID`.
    fn open(api: &Api, session: &str, query: &str, last_event_id: Option<i64>) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut req = agent
            .get(api.url(&format!("/sessions/{session}/inbox/stream{query}")))
            .header("Accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.call().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{resp:?}");
        let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        let reader: Box<dyn Read + Send> = Box::new(resp.into_body().into_with_config().reader());
        let mut c = SseClient {
            lines: BufReader::new(reader),
        };
        // The opening comment: the stream is subscribed once it arrives.
        let mut first = String::new();
        c.lines.read_line(&mut first).unwrap();
        assert!(first.starts_with(':'), "{first:?}");
        c
    }

    /// The next event (blocking), or None when the stream ends.
    fn next(&mut self) -> Option<Event> {
        let mut ev = Event {
            id: None,
            event: None,
            data: String::new(),
        };
        let mut any = false;
        loop {
            let mut line = String::new();
            if self.lines.read_line(&mut line).unwrap_or(0) == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if any {
                    return Some(ev);
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            any = true;
            match field {
                "id" => ev.id = Some(value.to_string()),
                "event" => ev.event = Some(value.to_string()),
                "data" => {
                    if !ev.data.is_empty() {
                        ev.data.push('\n');
                    }
                    ev.data.push_str(value);
                }
                _ => {}
            }
        }
    }

    /// The next event's message (its id checked against the data's).
    fn message(&mut self) -> Value {
        let ev = self.next().expect("the stream stays open");
        assert_eq!(ev.event.as_deref(), Some("message"), "{ev:?}");
        let m: Value = serde_json::from_str(&ev.data).unwrap();
        assert_eq!(
            ev.id.as_deref(),
            Some(m["id"].to_string().as_str()),
            "{ev:?}"
        );
        m
    }
}

/// `inbox --json` of `session`, as the CLI prints it.
fn cli_inbox(api: &Api, session: &str, flags: &[&str]) -> Value {
    let o = api
        .site
        .toolq(&[&["--json", "inbox", session], flags].concat());
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Enqueues `n` echo runs in `session` with the CLI (`enqueue --file`); returns their ids.
fn enqueue_echoes(site: &Site, session: &str, n: usize) -> Vec<String> {
    let file = site.dir.path().join(format!("runs-{session}.jsonl"));
    let lines: Vec<String> = (0..n)
        .map(|i| {
            json!({"tool": "echo", "args": {"message": format!("m{i}")}, "session": session})
                .to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let o = site.toolq(&["enqueue", "--file", file.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
    let ids: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), n);
    ids
}

/// A site whose worker runs `slots` runs at once, in one session too.
fn site_with_slots(slots: usize) -> Site {
    let site = Site::new();
    let cfg = site.dir.path().join("toolq.toml");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "[worker]\n",
        &format!("[worker]\nconcurrency = {slots}\nper_session = {slots}\n"),
    );
    std::fs::write(&cfg, text).unwrap();
    site
}

#[test]
fn a_page_is_the_clis_and_ack_acknowledges_by_ids_and_through() {
    let api = Api::new();
    let runs = enqueue_echoes(&api.site, "s1", 5);
    let _w = api.site.worker();
    wait_until("5 messages", || {
        api.site
            .db()
            .count("SELECT count(*) FROM inbox WHERE session_id = 's1'")
            == 5
    });

    // The whole inbox: the CLI's list, newest first; listing marks nothing read.
    let page = api.get("/sessions/s1/inbox").ok().clone();
    assert_eq!(page["messages"], cli_inbox(&api, "s1", &[]));
    let ids: Vec<i64> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 5);
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "{ids:?}");
    let about: HashSet<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(about, runs.iter().map(String::as_str).collect());
    assert_eq!(page["next_before"], Value::Null, "the page is not full");
    assert_eq!(page["next_after"], json!(ids[0]));
    assert_eq!(
        api.site
            .db()
            .count("SELECT count(*) FROM inbox WHERE read_at IS NOT NULL"),
        0
    );

    // Pages of 2 back, and forward from an id: as the CLI's --before / --after.
    let p1 = api.get("/sessions/s1/inbox?limit=2").ok().clone();
    assert_eq!(p1["messages"], cli_inbox(&api, "s1", &["--limit", "2"]));
    assert_eq!(p1["next_before"], json!(ids[1]));
    let p2 = api
        .get(&format!("/sessions/s1/inbox?limit=2&before={}", ids[1]))
        .ok()
        .clone();
    let b = ids[1].to_string();
    assert_eq!(
        p2["messages"],
        cli_inbox(&api, "s1", &["--limit", "2", "--before", &b])
    );
    assert_eq!(p2["next_before"], json!(ids[3]));
    let fwd = api
        .get(&format!("/sessions/s1/inbox?limit=2&after={}", ids[4]))
        .ok()
        .clone();
    let a = ids[4].to_string();
    assert_eq!(
        fwd["messages"],
        cli_inbox(&api, "s1", &["--limit", "2", "--after", &a])
    );
    assert_eq!(fwd["next_after"], json!(ids[2]));
    assert_eq!(fwd["next_before"], Value::Null);

    // Acknowledge one by id, then everything through the second newest.
    let a = api.post("/sessions/s1/inbox/ack", &json!({"ids": [ids[4]]}));
    assert_eq!(a.ok()["acknowledged"], 1);
    let again = api.post("/sessions/s1/inbox/ack", &json!({"ids": [ids[4]]}));
    assert_eq!(again.ok()["acknowledged"], 0, "already acknowledged");
    let other = api.post("/sessions/other/inbox/ack", &json!({"ids": [ids[3]]}));
    assert_eq!(other.ok()["acknowledged"], 0, "another session's message");
    let t = api.post("/sessions/s1/inbox/ack", &json!({"through": ids[1]}));
    assert_eq!(t.ok()["acknowledged"], 3);
    let unread = api.get("/sessions/s1/inbox?unread=true").ok().clone();
    assert_eq!(unread["messages"], cli_inbox(&api, "s1", &["--unread"]));
    assert_eq!(unread["messages"].as_array().unwrap().len(), 1);
    assert_eq!(unread["messages"][0]["id"], json!(ids[0]));
    assert_eq!(
        api.site
            .db()
            .count("SELECT count(*) FROM inbox WHERE acked_at IS NOT NULL AND read_at IS NOT NULL"),
        4
    );
}

#[test]
fn bad_sessions_and_bad_input_are_400s_naming_them_and_write_nothing() {
    let api = Api::new();
    let long = "x".repeat(201);
    for path in [
        format!("/sessions/{long}/inbox"),
        "/sessions/a%0Ab/inbox".to_string(),
        "/sessions/%20/inbox/stream".to_string(),
    ] {
        let p = api.get(&path).problem(400).clone();
        assert_eq!(p["field"], "session", "{path}: {p}");
    }
    let p = api
        .post("/sessions/a%0Ab/inbox/ack", &json!({"ids": [1]}))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "session");

    let p = api.get("/sessions/s/inbox?limit=0").problem(400).clone();
    assert_eq!(
        (p["field"].clone(), p["value"].clone()),
        (json!("limit"), json!("0"))
    );
    let p = api.get("/sessions/s/inbox?before=x").problem(400).clone();
    assert_eq!(p["field"], "before");
    let p = api.get("/sessions/s/inbox?after=-1").problem(400).clone();
    assert_eq!(p["field"], "after");
    let p = api
        .get("/sessions/s/inbox?unacked=true")
        .problem(400)
        .clone();
    assert!(p["detail"].as_str().unwrap().contains("unacked"), "{p}");

    let p = api
        .post("/sessions/s/inbox/ack", &json!({}))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "ids");
    let p = api
        .post("/sessions/s/inbox/ack", &json!({"ids": [1, 0]}))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "ids[1]");
    let p = api
        .post("/sessions/s/inbox/ack", &json!({"ids": ["1"]}))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "ids[0]");
    let p = api
        .post("/sessions/s/inbox/ack", &json!({"through": 1, "all": true}))
        .problem(400)
        .clone();
    assert!(p["detail"].as_str().unwrap().contains("all"), "{p}");

    let p = api
        .call(
            "GET",
            "/sessions/s/inbox/stream",
            &[("Last-Event-ID", "seven")],
            None,
        )
        .problem(400)
        .clone();
    assert_eq!(
        (p["field"].clone(), p["value"].clone()),
        (json!("Last-Event-ID"), json!("seven"))
    );
    assert_eq!(api.site.db().count("SELECT count(*) FROM inbox"), 0);
}

#[test]
fn a_run_that_ends_is_pushed_on_the_stream_as_inbox_json_gives_it() {
    let api = Api::new();
    // An earlier message: a stream without a position starts after it, `after=0` sends it.
    let first = api
        .site
        .enqueue(&["echo", "--args", r#"{"message":"one"}"#, "--session", "s"]);
    let w = api.site.worker();
    wait_until("the first message", || {
        api.site.db().count("SELECT count(*) FROM inbox") == 1
    });
    drop(w);
    let mut all = SseClient::open(&api, "s", "?after=0", None);
    let m = all.message();
    assert_eq!(m["run_id"], first.as_str());
    let mut new = SseClient::open(&api, "s", "", None);
    let _other = SseClient::open(&api, "other", "", None);

    let second = api
        .site
        .enqueue(&["echo", "--args", r#"{"message":"two"}"#, "--session", "s"]);
    let _w = api.site.worker();
    let m2 = new.message();
    assert_eq!(m2["run_id"], second.as_str());
    assert_eq!(m2["kind"], "completed");
    assert_eq!(all.message(), m2);
    // Exactly the CLI's JSON for that message.
    let cli = cli_inbox(&api, "s", &[]);
    assert_eq!(cli[0], m2);

    // Resuming after the first message's id gives the second again, and nothing else.
    let mut resumed = SseClient::open(&api, "s", "?after=999999", Some(m["id"].as_i64().unwrap()));
    assert_eq!(resumed.message(), m2);
}

/// A run's end whose slot the worker refills in the same settle (same session, same tool)
/// wakes no other worker (on Postgres it notifies no one on the workers' channel); its
/// message is still pushed at once, not when something else happens to commit.
#[test]
fn a_message_is_pushed_when_its_runs_slot_is_refilled_at_once() {
    let api = Api::start(site_with_slots(1), &[]);
    let quick = api
        .site
        .enqueue(&["shell", "--args", r#"{"argv":["true"]}"#, "--session", "s"]);
    let _slow = api.site.enqueue(&[
        "shell",
        "--args",
        r#"{"argv":["sleep","60"]}"#,
        "--session",
        "s",
    ]);
    let mut sse = SseClient::open(&api, "s", "", None);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(sse.message());
    });
    let started = Instant::now();
    let _w = api.site.worker();
    let m = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the quick run's message while the slow one runs");
    assert_eq!(m["run_id"], quick.as_str());
    eprintln!("pushed {:?} after the worker started", started.elapsed());
}

/// How many runs end while the reconnecting client reads: 10,000 as the issue asks, on both
/// engines.
const RECONNECT_RUNS: usize = 10_000;

/// The issue's test: a client that disconnects and reconnects (with `Last-Event-ID`) more
/// than 100 times while 10,000 runs end in its session receives every message exactly once,
/// in increasing id order.
#[test]
fn a_client_reconnecting_100_times_while_10000_runs_end_gets_each_message_once() {
    let n = RECONNECT_RUNS;
    let api = Api::start(site_with_slots(32), &[]);
    let started = Instant::now();
    let mut sse = SseClient::open(&api, "busy", "?after=0", None);
    let runs = enqueue_echoes(&api.site, "busy", n);
    let _w: Killed = api.site.worker();

    // A new connection every `per` events (so at least 101 connections), and the client
    // drops each mid-stream, with whatever it buffered of the next events.
    let per = n / 101;
    let mut seen_runs = HashSet::new();
    let mut last_id = 0i64;
    let mut connections = 1;
    let mut in_this = 0;
    while seen_runs.len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{} of {n} messages after {connections} connections",
            seen_runs.len()
        );
        let m = sse.message();
        let id = m["id"].as_i64().unwrap();
        assert!(
            id > last_id,
            "id {id} after {last_id}: repeated or out of order"
        );
        last_id = id;
        let run = m["run_id"].as_str().unwrap().to_string();
        assert!(seen_runs.insert(run.clone()), "{run} twice");
        in_this += 1;
        if in_this == per {
            drop(sse);
            sse = SseClient::open(&api, "busy", "", Some(last_id));
            connections += 1;
            in_this = 0;
        }
    }
    assert!(connections > 100, "{connections} connections");
    assert_eq!(
        seen_runs,
        runs.into_iter().collect::<HashSet<_>>(),
        "every run's message"
    );
    // Nothing more: the next event would be a duplicate or a stray.
    assert_eq!(
        api.site
            .db()
            .count("SELECT count(*) FROM inbox WHERE session_id = 'busy'"),
        n as i64
    );
    eprintln!(
        "{n} runs, {connections} connections: {:?} ({ENGINE:?})",
        started.elapsed()
    );
}

/// The issue's load test: 1,000 `POST /runs` from 50 concurrent clients lose nothing and
/// duplicate nothing (one row per accepted request, distinct ids, every request's key once).
#[test]
fn enqueue_load_1000_requests_from_50_clients_lose_and_duplicate_nothing() {
    const CLIENTS: usize = 50;
    const PER: usize = 20;
    let api = Api::new();
    let url = api.url("/runs");
    let ids: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let url = url.clone();
                s.spawn(move || {
                    // One agent per client: its connection is kept alive across requests.
                    let agent: ureq::Agent = ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .build()
                        .into();
                    (0..PER)
                        .map(|i| {
                            let body = json!({
                                "tool": "echo",
                                "args": {"message": format!("c{c}-{i}")},
                                "session": format!("load{}", c % 5),
                                "idempotency_key": format!("load-{c}-{i}"),
                            });
                            let mut r = agent
                                .post(&url)
                                .header("Content-Type", "application/json")
                                .send(serde_json::to_vec(&body).unwrap())
                                .unwrap();
                            let status = r.status().as_u16();
                            let v: Value =
                                serde_json::from_str(&r.body_mut().read_to_string().unwrap())
                                    .unwrap();
                            assert!((200..300).contains(&status), "{status}: {v}");
                            assert_ne!(v["created"], json!(false), "{v}");
                            v["id"].as_str().unwrap().to_string()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let n = (CLIENTS * PER) as i64;
    assert_eq!(ids.len() as i64, n);
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len() as i64,
        n,
        "distinct ids"
    );
    let db = api.site.db();
    assert_eq!(
        db.count("SELECT count(*) FROM runs"),
        n,
        "one row per request"
    );
    assert_eq!(
        db.count("SELECT count(DISTINCT idempotency_key) FROM runs"),
        n,
        "every request's key once"
    );
    let stored: HashSet<String> = db.column("SELECT id FROM runs").into_iter().collect();
    assert_eq!(
        stored,
        ids.into_iter().collect::<HashSet<_>>(),
        "the answered ids"
    );
}
