//! Test environment: a temp dir with a real database file, a manual clock, test tools.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tempfile::TempDir;
use toolq::tool::{ToolHints, ToolPolicy};
use toolq::{
    Client, Config, ManualClock, RegistryBuilder, Tool, ToolContext, ToolDef, ToolOutcome,
};

pub fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// A temp dir holding `toolq.db`, a manual clock and a client with built-ins + test tools.
pub struct TestEnv {
    pub dir: TempDir,
    pub clock: ManualClock,
    pub client: Client,
    pub counter: Arc<AtomicUsize>,
}

impl TestEnv {
    pub fn new() -> Self {
        Self::with_config(|_| {})
    }

    pub fn with_config(f: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            db_path: dir.path().join("toolq.db").display().to_string(),
            ..Config::default()
        };
        config.worker.poll_interval = Duration::from_millis(20);
        config.worker.heartbeat_interval = Duration::from_millis(200);
        config.worker.flush_interval = Duration::from_millis(50);
        config.worker.cancel_grace = Duration::from_millis(200);
        config.worker.shutdown_grace = Duration::from_secs(5);
        f(&mut config);
        let clock = ManualClock::new(t("2026-11-01T12:00:00Z"));
        let counter = Arc::new(AtomicUsize::new(0));
        let registry = RegistryBuilder::new()
            .with_builtins()
            .with_config_tools(&config)
            .unwrap()
            .tool(Counter(counter.clone()))
            .tool(Panics)
            .tool(FailsInternally)
            .tool(Hangs)
            .tool(Chatty)
            .build()
            .unwrap();
        let client = Client::open_with_clock(config, registry, Arc::new(clock.clone())).unwrap();
        TestEnv {
            dir,
            clock,
            client,
            counter,
        }
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("toolq.db")
    }

    /// Runs one query returning a single integer.
    pub fn count(&self, sql: &str) -> i64 {
        let c = rusqlite::Connection::open(self.db_path()).unwrap();
        c.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// Runs a worker in drain mode until nothing is left.
    pub async fn drain(&self) -> toolq::WorkerReport {
        let w = self.client.worker(toolq::WorkerOptions { drain: true });
        tokio::time::timeout(Duration::from_secs(60), w.run(Default::default()))
            .await
            .expect("drain finished in time")
            .unwrap()
    }
}

/// Shorthand for instants relative to a manual clock.
pub trait ClockExt {
    fn now_plus_secs(&self, secs: i64) -> DateTime<Utc>;
}

impl ClockExt for ManualClock {
    fn now_plus_secs(&self, secs: i64) -> DateTime<Utc> {
        toolq::Clock::now(self) + chrono::Duration::seconds(secs)
    }
}

/// Polls `f` until it returns Some, failing with the last value seen.
pub async fn wait_for<T: std::fmt::Debug>(
    what: &str,
    mut f: impl AsyncFnMut() -> (Option<T>, String),
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        let (v, seen) = f().await;
        if let Some(v) = v {
            return v;
        }
        last = seen;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}; last seen: {last}");
}

fn obj() -> Value {
    json!({"type": "object"})
}

/// Counts its calls.
pub struct Counter(pub Arc<AtomicUsize>);
#[async_trait]
impl Tool for Counter {
    fn definition(&self) -> ToolDef {
        ToolDef::new("counter", "counts calls", obj())
            .hints(ToolHints::default().with_supports_background(true))
    }
    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        ToolOutcome::ok(json!({ "n": n }))
    }
}

/// Panics.
pub struct Panics;
#[async_trait]
impl Tool for Panics {
    fn definition(&self) -> ToolDef {
        ToolDef::new("panic", "panics", obj())
    }
    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        panic!("boom in tool");
    }
}

/// Fails with an internal error whose detail must stay ops-only.
pub struct FailsInternally;
#[async_trait]
impl Tool for FailsInternally {
    fn definition(&self) -> ToolDef {
        ToolDef::new("fail", "fails internally", obj())
    }
    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        ToolOutcome::Internal("db password rejected for user admin".into())
    }
}

/// Never returns and ignores cancellation.
pub struct Hangs;
#[async_trait]
impl Tool for Hangs {
    fn definition(&self) -> ToolDef {
        ToolDef::new("hang", "hangs", obj())
            .hints(ToolHints::default())
            .policy(ToolPolicy::Auto)
    }
    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        std::future::pending::<()>().await;
        ToolOutcome::ok(Value::Null)
    }
}

/// Writes `{"bytes": N}` bytes of output.
pub struct Chatty;
#[async_trait]
impl Tool for Chatty {
    fn definition(&self) -> ToolDef {
        ToolDef::new("chatty", "writes output", obj())
    }
    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let n = ctx.args["bytes"].as_u64().unwrap_or(0) as usize;
        let line = ctx.args["line"].as_str().unwrap_or("x").to_string();
        let mut written = 0;
        while written < n {
            let chunk: String = line.chars().cycle().take((n - written).min(1000)).collect();
            written += chunk.len();
            ctx.sink
                .output(toolq::tool::Stream::Stdout, chunk.as_bytes());
        }
        ToolOutcome::ok(json!({ "written": written }))
    }
}

/// Runs the `toolq` binary on `db` with `args` (no config, `TOOLQ_*` override or log filter
/// from the environment).
pub fn toolq(db: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolq"));
    cmd.arg("--db").arg(db).args(args).env_remove("RUST_LOG");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TOOLQ_") {
            cmd.env_remove(k);
        }
    }
    cmd.output().expect("the toolq binary runs")
}

/// A child process (a worker) killed when the test ends, also when an assertion fails first.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `done` every 5 ms until it holds; fails naming `what` after 120 s.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
