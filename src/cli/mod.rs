//! The operator CLI: `toolq [--db PATH] [--config PATH] [--json] COMMAND`. One file per
//! subcommand; each parses its flags, calls the library, and renders through [`render`].

mod approve;
mod bulk;
mod cancel;
mod deny;
mod enqueue;
mod inbox;
mod init;
mod logging;
mod logs;
mod progress;
mod prune;
pub mod render;
mod result;
mod retry;
mod runs;
mod schedule;
mod show;
mod stats;
mod status;
mod tools;
mod worker;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::client::Client;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::tool::{Registry, RegistryBuilder};

/// toolq: a durable job-queue worker for tool runs, backed by one SQLite file.
#[derive(Debug, Parser)]
#[command(name = "toolq", version, about, long_about = None)]
pub struct Cli {
    /// The database file [default: database.path from the config, else ./toolq.db].
    #[arg(long, global = true, env = "TOOLQ_DB", value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// A config file (see config.toml for every key and its default).
    #[arg(long, global = true, env = "TOOLQ_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Print machine-readable JSON on stdout instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create (or migrate) the database and print where it is.
    Init(init::Args),
    /// Run the worker: claim and execute runs until SIGINT/SIGTERM (or --drain).
    Worker(worker::Args),
    /// Enqueue a run (or a batch with --file).
    Enqueue(enqueue::Args),
    /// List runs, newest first.
    Runs(runs::Args),
    /// Show one run in full.
    Show(show::Args),
    /// Print a run's log.
    Logs(logs::Args),
    /// Print a run's result JSON.
    Result(result::Args),
    /// Cancel a queued, awaiting or running run (or every run filters match).
    Cancel(cancel::Args),
    /// Re-queue a failed or cancelled run as a new attempt (or every run filters match).
    Retry(retry::Args),
    /// List a session's inbox messages.
    Inbox(inbox::Args),
    /// List the registered tools, or show one with its schema.
    Tools(tools::Args),
    /// Approve a run awaiting approval: it is queued to run.
    Approve(approve::Args),
    /// Deny a run awaiting approval: it is cancelled with a message.
    Deny(deny::Args),
    /// Counts by state, oldest queued run, database settings.
    Stats(stats::Args),
    /// Delete old finished runs (with logs, results, messages), acknowledged messages and
    /// schedule occurrences, in short batches.
    Prune(prune::Args),
    /// Worker processes: alive, stale, dead or stopped; exits 1 when a live worker is stale.
    Status(status::Args),
    /// Cron monitors and one-shots: add, list, show, cancel, enable, preview.
    Schedule(schedule::Args),
}

/// What every subcommand gets.
pub struct Ctx {
    /// The opened database with its tools.
    pub client: Client,
    /// `--json` was given.
    pub json: bool,
}

/// Loads the configuration: `--config` if given, else the built-in defaults; `--db` wins.
pub fn load_config(cli: &Cli) -> Result<Config> {
    let mut config = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(db) = &cli.db {
        config.db_path = db.display().to_string();
    }
    Ok(config)
}

/// The tools this process can run: the built-ins plus what the config defines.
pub fn registry(config: &Config) -> Result<Registry> {
    let registry = RegistryBuilder::new()
        .with_builtins()
        .with_config_tools(config)?
        .build()?;
    if let Some(name) = config
        .approvals
        .require
        .iter()
        .find(|n| registry.get(n).is_none())
    {
        return Err(crate::error::InputError::new(
            "approvals.require",
            name,
            "names a tool that is not registered",
        )
        .into());
    }
    Ok(registry)
}

fn init_tracing(command: &Command) -> Result<()> {
    Ok(match command {
        Command::Worker(a) => logging::init(a.log_format, a.log.as_deref(), "info"),
        _ => logging::init(logging::LogFormat::Text, None, "warn"),
    }?)
}

async fn dispatch(cli: Cli) -> Result<()> {
    let config = load_config(&cli)?;
    let registry = registry(&config)?;
    let client = Client::open(config, registry)?;
    let ctx = Ctx {
        client,
        json: cli.json,
    };
    match cli.command {
        Command::Init(a) => init::run(&ctx, a).await,
        Command::Worker(a) => worker::run(&ctx, a).await,
        Command::Enqueue(a) => enqueue::run(&ctx, a).await,
        Command::Runs(a) => runs::run(&ctx, a).await,
        Command::Show(a) => show::run(&ctx, a).await,
        Command::Logs(a) => logs::run(&ctx, a).await,
        Command::Result(a) => result::run(&ctx, a).await,
        Command::Cancel(a) => cancel::run(&ctx, a).await,
        Command::Retry(a) => retry::run(&ctx, a).await,
        Command::Inbox(a) => inbox::run(&ctx, a).await,
        Command::Tools(a) => tools::run(&ctx, a).await,
        Command::Approve(a) => approve::run(&ctx, a).await,
        Command::Deny(a) => deny::run(&ctx, a).await,
        Command::Stats(a) => stats::run(&ctx, a).await,
        Command::Prune(a) => prune::run(&ctx, a).await,
        Command::Status(a) => status::run(&ctx, a).await,
        Command::Schedule(a) => schedule::run(&ctx, a).await,
    }
}

/// Runs the CLI and returns the process exit code: 0 ok, 1 operational error, 2 bad usage
/// or input. Errors go to stderr as `toolq: ...`.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = e.exit_code();
            let _ = e.print();
            return code;
        }
    };
    if let Err(e) = init_tracing(&cli.command) {
        render::error(&e);
        return e.exit_code();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            render::error(&Error::io("start the async runtime", e));
            return 1;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(()) => 0,
        Err(e) => {
            render::error(&e);
            e.exit_code()
        }
    }
}

/// Parses a run id argument (exit 2 on a malformed id).
pub(crate) fn run_id(s: &str) -> Result<crate::ids::RunId> {
    Ok(s.parse()?)
}
