//! The dashboard benchmark (issue 23): seeds a database through the library and measures how
//! long `toolq web` takes to answer each page. `bench/web.sh` runs both halves.
//!
//! `cargo run --profile dist --example web_bench -- seed DB COUNT` fills DB with COUNT finished runs
//! (one in ten failed) over 50 sessions, then 2,000 queued runs (due tomorrow) and 100 runs
//! awaiting approval; it writes a run id from the middle to `DB.mid`.
//! `cargo run --profile dist --example web_bench -- measure URL DB REQUESTS` requests every page
//! REQUESTS times in a row and prints one JSON line per page: p50, p99 and max in ms (the time
//! from request to the whole body over loopback: an upper bound of the server's time).

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use toolq::tool::ToolHints;
use toolq::{
    Client, Config, EnqueueRequest, RegistryBuilder, Tool, ToolContext, ToolDef, ToolOutcome,
    WorkerOptions,
};

/// Succeeds at once, or fails when `fail` is true.
struct Quick(&'static str);

#[async_trait]
impl Tool for Quick {
    fn definition(&self) -> ToolDef {
        ToolDef::new(self.0, "benchmark tool", json!({"type": "object"}))
            .hints(ToolHints::default().with_supports_background(true))
    }
    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        if ctx.args["fail"].as_bool() == Some(true) {
            ToolOutcome::tool_error("failed on purpose")
        } else {
            ToolOutcome::ok(json!({"i": ctx.args["i"]}))
        }
    }
}

fn client(db: &Path) -> anyhow::Result<Client> {
    let mut config = Config {
        db_path: db.to_string_lossy().into_owned(),
        ..Config::default()
    };
    config.worker.concurrency = 64;
    config.worker.per_session = 64;
    config.sessions.max_active_runs = 10_000_000;
    config.approvals.require = vec!["gate".into()];
    config.retention.enabled = false;
    let registry = RegistryBuilder::new()
        .tool(Quick("work"))
        .tool(Quick("gate"))
        .build()?;
    Ok(Client::open(config, registry)?)
}

async fn seed(db: &Path, count: usize) -> anyhow::Result<()> {
    let c = client(db)?;
    let started = Instant::now();
    let mut mid = None;
    for chunk in 0..count.div_ceil(1000) {
        let reqs: Vec<EnqueueRequest> = (chunk * 1000..((chunk + 1) * 1000).min(count))
            .map(|i| {
                let mut r = EnqueueRequest::new("work", json!({"i": i, "fail": i % 10 == 0}))
                    .session(format!("s{}", i % 50))
                    .title(format!("Bench run {i}"));
                r.max_attempts = Some(1);
                r
            })
            .collect();
        let ids = c.enqueue_batch(reqs).await?;
        if chunk == count / 2000 {
            mid = ids.first().map(|e| e.run_id.to_string());
        }
    }
    eprintln!("enqueued {count} in {:?}", started.elapsed());
    let worker = c.worker(WorkerOptions { drain: true });
    let report = worker
        .run(tokio_util::sync::CancellationToken::new())
        .await?;
    eprintln!("drained {} in {:?}", report.claimed, started.elapsed());
    let tomorrow = c.now() + chrono::Duration::days(1);
    let queued: Vec<EnqueueRequest> = (0..2000)
        .map(|i| {
            let mut r =
                EnqueueRequest::new("work", json!({"i": i})).session(format!("s{}", i % 50));
            r.run_at = Some(tomorrow);
            r
        })
        .collect();
    c.enqueue_batch(queued).await?;
    let gated: Vec<EnqueueRequest> = (0..100)
        .map(|i| EnqueueRequest::new("gate", json!({"i": i})).session("approvals"))
        .collect();
    c.enqueue_batch(gated).await?;
    std::fs::write(format!("{}.mid", db.display()), mid.unwrap_or_default())?;
    Ok(())
}

fn measure(url: &str, db: &Path, n: usize) -> anyhow::Result<()> {
    let mid = std::fs::read_to_string(format!("{}.mid", db.display()))?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let pages = [
        "/".to_string(),
        "/runs".into(),
        format!("/runs?before={mid}"),
        "/runs?state=failed".into(),
        "/runs?state=completed&session=s7".into(),
        "/runs?state=queued".into(),
        "/runs?tool=gate".into(),
        "/runs?newer_than=1h".into(),
        format!("/runs/{mid}"),
        "/schedules".into(),
        "/approvals".into(),
        "/sessions/s7".into(),
        "/sessions/approvals".into(),
        "/runs?session=nobody".into(),
        "/workers".into(),
    ];
    for page in pages {
        for accept in ["text/html", "application/json"] {
            let mut ms = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                let mut resp = agent
                    .get(&format!("{url}{page}"))
                    .header("Accept", accept)
                    .call()?;
                let body = resp.body_mut().read_to_string()?;
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
                std::hint::black_box(body);
            }
            ms.sort_by(f64::total_cmp);
            let q = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
            println!(
                "{}",
                json!({"page": page, "accept": accept, "requests": n,
                       "p50_ms": (q(0.5) * 100.0).round() / 100.0,
                       "p99_ms": (q(0.99) * 100.0).round() / 100.0,
                       "max_ms": (q(1.0) * 100.0).round() / 100.0})
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["seed", db, count] => count
            .parse::<usize>()
            .map_err(anyhow::Error::from)
            .and_then(|n| tokio::runtime::Runtime::new()?.block_on(seed(Path::new(db), n))),
        ["measure", url, db, n] => n
            .parse::<usize>()
            .map_err(anyhow::Error::from)
            .and_then(|n| measure(url, Path::new(db), n)),
        _ => Err(anyhow::anyhow!(
            "usage: web_bench seed DB COUNT | web_bench measure URL DB REQUESTS"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("web_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
