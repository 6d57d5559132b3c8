//! Test environment: a temp dir with a real database (a SQLite file, or a fresh database on
//! the throwaway Postgres server of [`pg`], as the test binary's `crate::ENGINE` says), a
//! manual clock, test tools.

#[path = "support/pg.rs"]
pub mod pg;

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

/// The engine a test binary runs its tests on: `tests/it` on SQLite, `tests/postgres` (the
/// same modules) on Postgres.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// This binary's engine.
pub const ENGINE: Engine = crate::ENGINE;

/// One test's database: `toolq.db` in the test's temp dir on SQLite; a fresh database on the
/// shared Postgres server (dropped with the last clone) on Postgres. Pass it wherever `--db`
/// or `db_path` goes (`&db` is an `OsStr`); read it with plain SQL through [`TestDb::count`],
/// [`TestDb::rows`] and [`TestDb::exec`] on either engine.
#[derive(Clone)]
pub struct TestDb {
    /// The path (SQLite) or URL (Postgres).
    pub url: String,
    pg: Option<Arc<pg::Database>>,
}

impl TestDb {
    /// A fresh database for a test whose files live in `dir`.
    pub fn at(dir: &std::path::Path) -> Self {
        match ENGINE {
            Engine::Sqlite => TestDb {
                url: dir.join("toolq.db").display().to_string(),
                pg: None,
            },
            Engine::Postgres => {
                let db = pg::Database::create();
                TestDb {
                    url: db.url.clone(),
                    pg: Some(Arc::new(db)),
                }
            }
        }
    }

    /// `config` pointed at this database: `db_path` on SQLite, `db_url` on Postgres.
    pub fn configure(&self, config: &mut Config) {
        match ENGINE {
            Engine::Sqlite => config.db_path = self.url.clone(),
            Engine::Postgres => config.db_url = Some(self.url.clone()),
        }
    }

    /// The default configuration on this database.
    pub fn config(&self) -> Config {
        let mut c = Config::default();
        self.configure(&mut c);
        c
    }

    /// SQL reading the blob column `col` as UTF-8 text.
    pub fn blob_as_text(&self, col: &str) -> String {
        match ENGINE {
            Engine::Sqlite => format!("CAST({col} AS TEXT)"),
            Engine::Postgres => format!("convert_from({col}, 'UTF8')"),
        }
    }

    /// The SQLite file (for `sqlite_only_*` tests).
    pub fn file(&self) -> &std::path::Path {
        assert_eq!(
            ENGINE,
            Engine::Sqlite,
            "a SQLite-only test runs on {ENGINE:?}"
        );
        std::path::Path::new(&self.url)
    }

    /// Whether toolq created its schema here (on SQLite: the file exists).
    pub fn has_schema(&self) -> bool {
        match ENGINE {
            Engine::Sqlite => self.file().exists(),
            Engine::Postgres => {
                self.count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") > 0
            }
        }
    }

    /// The rows of `sql`, every value as text (NULL as None).
    pub fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        self.try_rows(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The rows of `sql`, or the engine's error (a table not created yet, say).
    pub fn try_rows(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        match ENGINE {
            Engine::Sqlite => sqlite_rows(&self.url, sql).map_err(|e| e.to_string()),
            Engine::Postgres => self.pg_db().rows(sql),
        }
    }

    /// The first column of the first row of `sql`, as text (panics if there is no row).
    pub fn text(&self, sql: &str) -> Option<String> {
        let rows = self.rows(sql);
        let row = rows.first().unwrap_or_else(|| panic!("no row from {sql}"));
        row.first().cloned().flatten()
    }

    /// Runs one query returning a single integer.
    pub fn count(&self, sql: &str) -> i64 {
        let v = self.text(sql).unwrap_or_else(|| panic!("NULL from {sql}"));
        v.parse()
            .unwrap_or_else(|e| panic!("{sql} gave {v:?}, not an integer: {e}"))
    }

    /// The first column of every row of `sql`, as text (NULL as "NULL").
    pub fn column(&self, sql: &str) -> Vec<String> {
        self.rows(sql)
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .next()
                    .flatten()
                    .unwrap_or_else(|| "NULL".into())
            })
            .collect()
    }

    fn pg_db(&self) -> &pg::Database {
        self.pg.as_deref().expect("a Postgres database")
    }

    /// Runs statements that return nothing.
    pub fn exec(&self, sql: &str) {
        self.try_exec(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Runs statements that return nothing, giving the engine's error message.
    pub fn try_exec(&self, sql: &str) -> Result<(), String> {
        match ENGINE {
            Engine::Sqlite => {
                let c = rusqlite::Connection::open(&self.url).map_err(|e| e.to_string())?;
                c.busy_timeout(std::time::Duration::from_secs(10))
                    .map_err(|e| e.to_string())?;
                c.execute_batch(sql).map_err(|e| e.to_string())
            }
            Engine::Postgres => self.pg_db().rows(sql).map(drop),
        }
    }
}

fn sqlite_rows(path: &str, sql: &str) -> rusqlite::Result<Vec<Vec<Option<String>>>> {
    use rusqlite::types::Value;
    let c = rusqlite::Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(10))?;
    let mut st = c.prepare(sql)?;
    let n = st.column_count();
    st.query_map([], |r| {
        (0..n)
            .map(|i| {
                Ok(match r.get::<_, Value>(i)? {
                    Value::Null => None,
                    Value::Integer(v) => Some(v.to_string()),
                    Value::Real(v) => Some(v.to_string()),
                    Value::Text(v) => Some(v),
                    Value::Blob(v) => Some(String::from_utf8_lossy(&v).into_owned()),
                })
            })
            .collect()
    })?
    .collect()
}

impl AsRef<std::ffi::OsStr> for TestDb {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.url.as_ref()
    }
}

impl std::fmt::Display for TestDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

/// A temp dir holding the database, a manual clock and a client with built-ins + test tools.
pub struct TestEnv {
    pub db: TestDb,
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
        let db = TestDb::at(dir.path());
        let mut config = db.config();
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
            db,
            dir,
            clock,
            client,
            counter,
        }
    }

    /// The database location: the SQLite file, or the Postgres URL (`--db` takes both).
    pub fn db_path(&self) -> PathBuf {
        PathBuf::from(&self.db.url)
    }

    /// Runs one query returning a single integer, on either engine.
    pub fn count(&self, sql: &str) -> i64 {
        self.db.count(sql)
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

/// Runs the `toolq` binary on `db` (a path, URL or [`TestDb`]) with `args` (no config,
/// `TOOLQ_*` override or log filter from the environment).
pub fn toolq(db: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> std::process::Output {
    toolq_command()
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("the toolq binary runs")
}

/// The toolq binary with nothing from the test's environment that would change what it does:
/// no `TOOLQ_*` override, no log filter, no libpq variable (`PGSSLMODE`, `PGPASSWORD`,
/// `PGHOST`...), which the Postgres engine reads, and no password file (`PGPASSFILE` names
/// one that does not exist, so the developer's `~/.pgpass` is not read either).
pub fn toolq_command() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolq"));
    cmd.env_remove("RUST_LOG");
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if name.starts_with("TOOLQ_") || name.starts_with("PG") {
            cmd.env_remove(k);
        }
    }
    cmd.env("PGPASSFILE", "/nonexistent/toolq-tests/pgpass");
    cmd
}

/// The host binary of `examples/custom_cli.rs` (a host's own binary running the stock CLI with
/// its Rust tool). `cargo test` (what CI runs) builds it fresh with the other targets;
/// `cargo test --test it` does not, so it is built here when missing. Not on every run: a
/// nested `cargo build` under `cargo test` sees a different environment and rebuilds half the
/// dependency tree each time.
pub fn custom_cli_example() -> PathBuf {
    let debug = PathBuf::from(env!("CARGO_BIN_EXE_toolq"))
        .parent()
        .unwrap()
        .to_path_buf();
    let bin = debug.join("examples").join("custom_cli");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let o = std::process::Command::new(cargo)
            .args(["build", "--example", "custom_cli"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    bin
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
