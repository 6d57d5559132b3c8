//! The HTTP API's figures (issue 37): the API server ([`toolq::web::WebServer`]) and a worker
//! run in this process on one database; clients talk to the server over loopback HTTP.
//!
//! `cargo run --profile dist --example api_bench -- [--db PATH|postgres://URL] [--requests 1000]
//! [--clients 50] [--runs 2000]`
//!
//! Without `--db`, a fresh SQLite file in a temporary directory. Prints one JSON line:
//! - `enqueue`: `requests` `POST /api/v1/runs` from `clients` threads at once, each with its
//!   own keep-alive connection (blocking ureq), the worker stopped meanwhile: requests/s over
//!   the wall time, p50/p99 of each request's time to the whole answer. Checked: every
//!   request answered 2xx with a distinct id, and the database holds exactly that many new
//!   runs. It runs after `stream`, with the worker stopped, so its runs stay queued. If the
//!   server has no `POST /runs` (404), `enqueue` says so and the rest still runs.
//! - `stream`: `runs` runs enqueued one at a time (through the library) in a session whose
//!   stream one client reads (`GET .../inbox/stream`, blocking ureq): the latency from the
//!   run's end to its event parsed at the client, p50/p99/max. "The run's end" is the instant
//!   the tool's call returns (read in the tool, on the same monotonic clock as the client's
//!   arrival): the figure includes the worker writing the end (its commit), the change feed
//!   waking the stream, the read, and the HTTP hop. It is an upper bound of commit-to-event.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::tool::ToolHints;
use toolq::web::{WebOptions, WebServer};
use toolq::{
    Client, Config, EnqueueRequest, RegistryBuilder, Tool, ToolContext, ToolDef, ToolOutcome,
    WorkerOptions,
};

/// When each `stamp` run's tool returned, by run id.
fn ended() -> &'static Mutex<HashMap<String, Instant>> {
    static ENDED: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();
    ENDED.get_or_init(Default::default)
}

/// Records the instant it returns.
struct Stamp;

#[async_trait]
impl Tool for Stamp {
    fn definition(&self) -> ToolDef {
        ToolDef::new("stamp", "records when it ends", json!({"type": "object"}))
            .hints(ToolHints::default().with_supports_background(true))
    }
    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let out = ToolOutcome::ok(json!({"ok": true}));
        if let Ok(mut m) = ended().lock() {
            m.insert(ctx.run_id.to_string(), Instant::now());
        }
        out
    }
}

struct Args {
    db: Option<String>,
    requests: usize,
    clients: usize,
    runs: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        db: None,
        requests: 1000,
        clients: 50,
        runs: 2000,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut it = v.iter();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let n = || {
            value
                .parse::<usize>()
                .with_context(|| format!("{flag} {value:?}"))
        };
        match flag.as_str() {
            "--db" => a.db = Some(value.clone()),
            "--requests" => a.requests = n()?,
            "--clients" => a.clients = n()?,
            "--runs" => a.runs = n()?,
            _ => bail!("unknown flag {flag}: --db, --requests, --clients, --runs"),
        }
    }
    if a.clients == 0 || a.requests < a.clients {
        bail!("--requests must be at least --clients (> 0)");
    }
    Ok(a)
}

fn client(db: &str) -> anyhow::Result<Client> {
    let mut config = Config {
        db_path: db.to_string(),
        ..Config::default()
    };
    config.worker.concurrency = 64;
    config.worker.per_session = 64;
    config.sessions.max_active_runs = 10_000_000;
    config.retention.enabled = false;
    let registry = RegistryBuilder::new().with_builtins().tool(Stamp).build()?;
    Ok(Client::open(config, registry)?)
}

/// The `q` quantile of sorted `ms`, rounded to 0.01 ms.
fn q(ms: &[f64], p: f64) -> f64 {
    let v = ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
    (v * 100.0).round() / 100.0
}

/// Part (a): `requests` POST /runs from `clients` threads.
fn enqueue(base: &str, requests: usize, clients: usize, tag: &str) -> anyhow::Result<Value> {
    let url = format!("{base}/api/v1/runs");
    let per = requests / clients;
    let started = Instant::now();
    let results: Vec<anyhow::Result<Vec<(f64, String)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let url = url.clone();
                s.spawn(move || -> anyhow::Result<Vec<(f64, String)>> {
                    let agent: ureq::Agent = ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .timeout_global(Some(Duration::from_secs(60)))
                        .build()
                        .into();
                    let mut out = Vec::with_capacity(per);
                    for i in 0..per {
                        let body = json!({
                            "tool": "echo",
                            "args": {"message": format!("c{c} r{i}")},
                            "session": format!("{tag}-load{}", c % 10),
                            "idempotency_key": format!("{tag}-{c}-{i}"),
                        });
                        let t = Instant::now();
                        let mut r = agent
                            .post(&url)
                            .header("Content-Type", "application/json")
                            .send(serde_json::to_vec(&body)?)?;
                        let status = r.status().as_u16();
                        let text = r.body_mut().read_to_string()?;
                        let ms = t.elapsed().as_secs_f64() * 1000.0;
                        if status == 404 || status == 405 {
                            bail!("no POST /runs on this server ({status})");
                        }
                        if !(200..300).contains(&status) {
                            bail!("POST /runs answered {status}: {text}");
                        }
                        let v: Value = serde_json::from_str(&text)?;
                        let id = v["id"].as_str().context("an id in the answer")?;
                        out.push((ms, id.to_string()));
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a client panicked")))
            })
            .collect()
    });
    let wall = started.elapsed();
    let mut ms = Vec::new();
    let mut ids = HashSet::new();
    for r in results {
        for (t, id) in r? {
            ms.push(t);
            ids.insert(id);
        }
    }
    let n = clients * per;
    if ids.len() != n {
        bail!("{n} requests answered {} distinct ids", ids.len());
    }
    ms.sort_by(f64::total_cmp);
    Ok(json!({
        "requests": n,
        "clients": clients,
        "requests_per_s": (n as f64 / wall.as_secs_f64()).round(),
        "p50_ms": q(&ms, 0.5),
        "p99_ms": q(&ms, 0.99),
        "max_ms": q(&ms, 1.0),
        "distinct_ids": ids.len(),
    }))
}

/// Reads `session`'s stream on a thread of its own, sending (run id, arrival) per event.
fn listen(base: &str, session: &str) -> anyhow::Result<mpsc::Receiver<(String, Instant)>> {
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let resp = agent
        .get(&format!("{base}/api/v1/sessions/{session}/inbox/stream"))
        .header("Accept", "text/event-stream")
        .call()?;
    let mut lines = BufReader::new(resp.into_body().into_with_config().reader());
    // The opening comment: the stream is in place once it arrives.
    let mut first = String::new();
    lines.read_line(&mut first)?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if let Some(data) = line.strip_prefix("data: ") {
                let at = Instant::now();
                let Ok(m) = serde_json::from_str::<Value>(data.trim_end()) else {
                    continue;
                };
                let run = m["run_id"].as_str().unwrap_or_default().to_string();
                if tx.send((run, at)).is_err() {
                    return;
                }
            }
        }
    });
    Ok(rx)
}

/// Part (b): `runs` runs one at a time; the time from each one's end to its event.
fn stream(
    rt: &tokio::runtime::Runtime,
    c: &Client,
    base: &str,
    runs: usize,
    tag: &str,
) -> anyhow::Result<Value> {
    let session = format!("{tag}-stream");
    let rx = listen(base, &session)?;
    let mut ms = Vec::with_capacity(runs);
    for i in 0..runs {
        let req = EnqueueRequest::new("stamp", json!({"i": i})).session(session.clone());
        let run = rt.block_on(c.enqueue(req))?.run_id.to_string();
        let (got, at) = rx
            .recv_timeout(Duration::from_secs(30))
            .with_context(|| format!("the event of run {i} ({run})"))?;
        if got != run {
            bail!("expected the event of {run}, got {got}");
        }
        let end = ended()
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .remove(&run)
            .context("the tool's end instant")?;
        ms.push(at.saturating_duration_since(end).as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    Ok(json!({
        "runs": runs,
        "end_to_event_p50_ms": q(&ms, 0.5),
        "end_to_event_p99_ms": q(&ms, 0.99),
        "end_to_event_max_ms": q(&ms, 1.0),
    }))
}

fn run(a: Args) -> anyhow::Result<Value> {
    let tmp = tempfile::tempdir()?;
    let db = a.db.clone().unwrap_or_else(|| {
        PathBuf::from(tmp.path())
            .join("api-bench.db")
            .to_string_lossy()
            .into_owned()
    });
    let engine = if toolq::db_url::is_postgres(&db) {
        "postgres"
    } else {
        "sqlite"
    };
    // Sessions of this invocation only, so a reused database does not mix figures.
    let tag = format!("b{}", std::process::id());
    let rt = tokio::runtime::Runtime::new()?;
    let c = client(&db)?;
    let stop = CancellationToken::new();
    let server = rt.block_on(WebServer::bind(
        c.clone(),
        WebOptions {
            listen: "127.0.0.1:0".into(),
            token: None,
            read_token: None,
            read_only: false,
        },
    ))?;
    let base = format!("http://{}", server.local_addr()?);
    rt.spawn(server.serve(stop.clone()));

    // (b) first, with a worker in this process.
    let worker = c.worker(WorkerOptions { drain: false });
    let wstop = CancellationToken::new();
    let wtask = rt.spawn(worker.run(wstop.clone()));
    let stream = stream(&rt, &c, &base, a.runs, &tag)?;
    wstop.cancel();
    rt.block_on(wtask)??;

    // (a) with the worker stopped: the enqueue path alone (its runs stay queued).
    let queued = || -> anyhow::Result<i64> {
        Ok(rt.block_on(toolq::status::status(&c, false))?.queued_runs)
    };
    let before = queued()?;
    let enqueue = match enqueue(&base, a.requests, a.clients, &tag) {
        Ok(mut v) => {
            let added = queued()? - before;
            if added != v["requests"].as_i64().unwrap_or(-1) {
                bail!("{} requests answered, {added} runs queued", v["requests"]);
            }
            v["queued_runs_added"] = json!(added);
            v
        }
        Err(e) => json!({"skipped": e.to_string()}),
    };
    stop.cancel();
    Ok(json!({
        "bench": "api",
        "engine": engine,
        "enqueue": enqueue,
        "stream": stream,
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
    }))
}

fn main() -> ExitCode {
    match parse_args().and_then(run) {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("api_bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
