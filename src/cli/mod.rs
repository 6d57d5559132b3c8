//! The operator CLI: `toolq [--db PATH] [--config PATH] [--json] COMMAND`. One file per
//! subcommand; each parses its flags, calls the library, and renders through [`render`].

mod approve;
mod bulk;
mod cancel;
mod check;
mod config;
mod deny;
mod enqueue;
mod generate;
mod inbox;
mod init;
mod logging;
mod logs;
mod pause;
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
mod wait;
mod web;
mod worker;
mod worker_start;

use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::client::Client;
use crate::config::{Config, Layers, Override};
use crate::error::{Error, InputError, Result};
use crate::store::OpenMode;
use crate::tool::{Registry, RegistryBuilder};

/// The help heading of the flags every subcommand takes, listed after its own.
const GLOBAL: &str = "Global options";

/// toolq: a durable job-queue worker for tool runs, backed by one SQLite file.
#[derive(Debug, Parser)]
#[command(name = "toolq", version, about, long_about = None)]
pub struct Cli {
    /// The database: a SQLite file, or a Postgres URL (postgres://user@host/db) [default:
    /// database.url, else database.path from the config, else ./toolq.db].
    // Empty values pass the parser so that `load_config` can name where one came from
    // (`TOOLQ_DB=` is not `--db ''`).
    #[arg(long, global = true, env = "TOOLQ_DB", value_name = "PATH|URL", help_heading = GLOBAL,
          value_parser = clap::builder::TypedValueParser::map(
              clap::builder::OsStringValueParser::new(), PathBuf::from))]
    pub db: Option<PathBuf>,
    /// A config file (see config.toml for every key and its default) [default: TOOLQ_CONFIG,
    /// else ./toolq.toml if present, else built-in defaults]. Any key can also be set by an
    /// environment variable TOOLQ_SECTION__KEY (e.g. TOOLQ_WORKER__CONCURRENCY=8).
    #[arg(long, global = true, value_name = "PATH", help_heading = GLOBAL)]
    pub config: Option<PathBuf>,
    /// Print machine-readable JSON on stdout instead of tables.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create (or migrate) the database and print where it is.
    #[command(after_help = "Examples:\n  toolq --db /var/lib/toolq/toolq.db init")]
    Init(init::Args),
    /// Run the worker: claim and execute runs until SIGINT/SIGTERM (or --drain).
    #[command(
        after_help = "Examples:\n  toolq --config toolq.toml worker\n  toolq worker --drain      # run what is queued, then exit"
    )]
    Worker(worker::Args),
    /// Enqueue a run (or a batch with --file).
    #[command(
        after_help = "Examples:\n  toolq enqueue echo --args '{\"message\":\"hi\"}' --session demo\n  toolq enqueue sleep --args '{\"ms\":5000}' --in 10m --priority 5\n  toolq enqueue --file runs.jsonl | xargs toolq wait"
    )]
    Enqueue(enqueue::Args),
    /// List runs, newest first.
    #[command(
        after_help = "Examples:\n  toolq runs --state queued --limit 20\n  toolq --json runs --session demo"
    )]
    Runs(runs::Args),
    /// Show one run in full.
    #[command(
        after_help = "Examples:\n  toolq show bg_0193...\n  toolq --json show bg_0193... | jq .state"
    )]
    Show(show::Args),
    /// Block until runs end: exit 0 if all completed, 1 otherwise (or on --timeout).
    Wait(wait::Args),
    /// Print a run's log.
    #[command(after_help = "Examples:\n  toolq logs bg_0193...")]
    Logs(logs::Args),
    /// Print a run's result JSON.
    #[command(after_help = "Examples:\n  toolq result bg_0193... | jq .result")]
    Result(result::Args),
    /// Cancel a queued, awaiting or running run (or every run filters match).
    #[command(
        after_help = "Examples:\n  toolq cancel bg_0193...\n  toolq cancel --tool http_request --state queued --dry-run\n  toolq cancel --session demo --older-than 1h"
    )]
    Cancel(cancel::Args),
    /// Re-queue a failed or cancelled run as a new attempt (or every run filters match).
    #[command(
        after_help = "Examples:\n  toolq retry bg_0193...\n  toolq retry --state failed --tool http_request --newer-than 2h"
    )]
    Retry(retry::Args),
    /// List a session's inbox messages.
    #[command(
        after_help = "Examples:\n  toolq inbox demo --unread --ack\n  toolq inbox demo --limit 20 --before 1200   # the page before message 1200\n  toolq inbox demo --follow\n  toolq inbox demo --deliverable --idle --ack   # what to announce now, then acknowledge it"
    )]
    Inbox(inbox::Args),
    /// List the registered tools, or show one with its schema.
    #[command(after_help = "Examples:\n  toolq tools\n  toolq tools echo")]
    Tools(tools::Args),
    /// Approve a run awaiting approval: it is queued to run.
    #[command(after_help = "Examples:\n  toolq approve bg_0193... --by alice")]
    Approve(approve::Args),
    /// Deny a run awaiting approval: it is cancelled with a message.
    #[command(after_help = "Examples:\n  toolq deny bg_0193... --by alice --reason 'not today'")]
    Deny(deny::Args),
    /// Counts by state, oldest queued run, database settings.
    #[command(after_help = "Examples:\n  toolq --json stats")]
    Stats(stats::Args),
    /// Delete old finished runs (with logs, results, messages), acknowledged messages and
    /// schedule occurrences, in short batches.
    #[command(after_help = "Examples:\n  toolq prune --older-than 30d")]
    Prune(prune::Args),
    /// Worker processes: alive, stale, dead or stopped; exits 1 when a live worker is stale.
    #[command(after_help = "Examples:\n  toolq status")]
    Status(status::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    #[command(
        after_help = "Examples:\n  toolq completions bash > ~/.local/share/bash-completion/completions/toolq\n  toolq completions zsh > \"${fpath[1]}/_toolq\"\n  toolq completions fish > ~/.config/fish/completions/toolq.fish"
    )]
    Completions(generate::CompletionsArgs),
    /// Print the man page (roff) on stdout.
    #[command(
        after_help = "Examples:\n  toolq man | man -l -\n  toolq man > /usr/local/share/man/man1/toolq.1"
    )]
    Man,
    /// Cron monitors and one-shots: add, list, show, cancel, enable, preview.
    #[command(
        after_help = "Examples:\n  toolq schedule add echo --cron '0 9 * * 1-5' --tz Europe/Berlin\n  toolq schedule list"
    )]
    Schedule(schedule::Args),
    /// Pause a tool, a session or everything: queued runs stay queued, running runs finish.
    #[command(
        after_help = "Examples:\n  toolq pause --tool http --by alice --reason 'API is down'\n  toolq pause --all"
    )]
    Pause(pause::PauseArgs),
    /// Resume what `pause` paused; workers pick the runs up at once.
    #[command(after_help = "Examples:\n  toolq resume --tool http\n  toolq resume --all")]
    Resume(pause::ResumeArgs),
    /// Check the database file's integrity (SQLite's integrity_check, or quick_check with
    /// --quick): prints `ok` or one line per problem; exits 1 when there is any.
    #[command(after_help = "Examples:\n  toolq check\n  toolq check --quick")]
    Check(check::Args),
    /// Print the effective configuration and where each value came from (default, file,
    /// environment variable, flag); an invalid configuration exits 2 with the error.
    #[command(
        after_help = "Examples:\n  toolq config\n  TOOLQ_WORKER__CONCURRENCY=8 toolq --json config\n  toolq --config /etc/toolq/toolq.toml config"
    )]
    Config(config::Args),
    /// Serve the web dashboard: runs, schedules, approvals, sessions and workers, live.
    #[command(
        after_help = "Examples:\n  toolq web                                  # http://127.0.0.1:8080/\n  TOOLQ_WEB__TOKEN=s3cret toolq web --listen 0.0.0.0:8080\n  toolq web --read-only --listen 127.0.0.1:9000"
    )]
    Web(web::Args),
}

/// What every subcommand gets.
pub struct Ctx {
    /// The opened database with its tools.
    pub client: Client,
    /// `--json` was given.
    pub json: bool,
    /// The config file in use and how it was chosen, or "built-in defaults".
    pub config_file: String,
}

/// Loads the configuration by the lookup order (`--config`, `TOOLQ_CONFIG`, `./toolq.toml`,
/// built-in defaults), then `TOOLQ_*__*` environment variables, then flags (`--db`, the
/// worker's). `db_from_env` says `--db` was given as `TOOLQ_DB` (named so in provenance).
pub fn load_config(cli: &Cli, db_from_env: bool) -> Result<(Config, Layers)> {
    let mut overrides = Vec::new();
    if let Some(db) = &cli.db {
        let flag = if db_from_env { "TOOLQ_DB" } else { "--db" };
        if db.as_os_str().is_empty() {
            let reason = if db_from_env {
                "is set but empty: unset it, or set it to a database file or a postgres:// URL"
            } else {
                "must not be empty: give a database file or a postgres:// URL"
            };
            return Err(InputError::new(flag, "", reason).into());
        }
        let db = db.display().to_string();
        if crate::db_url::is_postgres(&db) {
            overrides.push(Override::new("database.url", db, flag));
        } else {
            // A path given here wins over a url in the config file.
            overrides.push(Override::new("database.path", db, flag));
            overrides.push(Override::new("database.url", String::new(), flag));
        }
    }
    if let Command::Worker(a) = &cli.command {
        overrides.extend(a.overrides());
    }
    if let Command::Web(a) = &cli.command {
        overrides.extend(a.overrides());
    }
    Ok(crate::config::resolve(cli.config.as_deref(), &overrides)?)
}

/// The tools this process can run: the built-ins plus what the config defines.
pub fn registry(config: &Config) -> Result<Registry> {
    registry_with(config, RegistryBuilder::new())
}

/// The tools this process can run: `host`'s own tools, the built-ins and what the config
/// defines (a name registered twice is an error).
pub fn registry_with(config: &Config, host: RegistryBuilder) -> Result<Registry> {
    let registry = host.with_builtins().with_config_tools(config)?.build()?;
    if let Some(name) = config
        .approvals
        .require
        .iter()
        .find(|n| registry.get(n).is_none())
    {
        let known: Vec<&str> = registry.iter().map(|e| e.def.name.as_str()).collect();
        let hint = match crate::config::suggest(name, &known) {
            Some(s) => format!("; did you mean `{s}`?"),
            None => String::new(),
        };
        return Err(InputError::new(
            "approvals.require",
            name,
            format!(
                "names a tool that is not registered{hint}\n  registered tools: {}",
                known.join(", ")
            ),
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

/// Which commands may create the database file, and which only read it. Commands that add
/// work create a missing file; commands that change existing rows need it to exist; the
/// rest only read and open a file they may not write read-only.
fn open_mode(command: &Command) -> OpenMode {
    match command {
        Command::Init(_) | Command::Worker(_) | Command::Enqueue(_) => OpenMode::Create,
        Command::Schedule(a) => match a.command {
            schedule::Sub::Add(_) => OpenMode::Create,
            schedule::Sub::Cancel(_) | schedule::Sub::Enable(_) => OpenMode::Existing,
            schedule::Sub::List(_) | schedule::Sub::Show(_) | schedule::Sub::Preview(_) => {
                OpenMode::Read
            }
        },
        Command::Cancel(_)
        | Command::Retry(_)
        | Command::Approve(_)
        | Command::Deny(_)
        | Command::Pause(_)
        | Command::Resume(_)
        | Command::Prune(_) => OpenMode::Existing,
        // Read-only from the flag opens read-only; otherwise its actions write.
        Command::Web(a) if a.read_only => OpenMode::Read,
        Command::Web(_) => OpenMode::Existing,
        // Only --ack writes (--deliverable alone reads, silent messages included).
        Command::Inbox(a) if a.ack => OpenMode::Existing,
        Command::Inbox(_)
        | Command::Runs(_)
        | Command::Show(_)
        | Command::Logs(_)
        | Command::Result(_)
        | Command::Tools(_)
        | Command::Stats(_)
        | Command::Status(_)
        | Command::Check(_)
        | Command::Wait(_) => OpenMode::Read,
        // Answered before any database is opened (see dispatch).
        Command::Completions(_) | Command::Man | Command::Config(_) => OpenMode::Read,
    }
}

async fn dispatch(cli: Cli, host: RegistryBuilder, db_from_env: bool) -> Result<()> {
    match &cli.command {
        Command::Completions(a) => return generate::completions(a),
        Command::Man => return generate::man(),
        _ => {}
    }
    let (config, layers) = load_config(&cli, db_from_env)?;
    let registry = registry_with(&config, host)?;
    // These need no database: they neither open nor create one.
    let command = match cli.command {
        Command::Tools(a) => return tools::run(&registry, cli.json, a),
        Command::Config(a) => return config::run(&layers, cli.json, &a),
        Command::Schedule(schedule::Args {
            command: schedule::Sub::Preview(a),
        }) => return schedule::preview(cli.json, a),
        other => other,
    };
    // A worker waits for a Postgres server that cannot be reached yet, as it waits out an
    // outage.
    if let Command::Worker(a) = &command
        && !worker_start::wait_for_database(&config, open_mode(&command), a.drain).await?
    {
        return Ok(());
    }
    let client = Client::open_as(
        config,
        registry,
        std::sync::Arc::new(crate::clock::SystemClock),
        open_mode(&command),
    )?;
    let ctx = Ctx {
        client,
        json: cli.json,
        config_file: layers.file_summary(),
    };
    match command {
        Command::Init(a) => init::run(&ctx, a).await,
        Command::Worker(a) => worker::run(&ctx, a).await,
        Command::Enqueue(a) => enqueue::run(&ctx, a).await,
        Command::Runs(a) => runs::run(&ctx, a).await,
        Command::Show(a) => show::run(&ctx, a).await,
        Command::Wait(a) => wait::run(&ctx, a).await,
        Command::Logs(a) => logs::run(&ctx, a).await,
        Command::Result(a) => result::run(&ctx, a).await,
        Command::Cancel(a) => cancel::run(&ctx, a).await,
        Command::Retry(a) => retry::run(&ctx, a).await,
        Command::Inbox(a) => inbox::run(&ctx, a).await,
        Command::Tools(a) => tools::run(ctx.client.registry(), ctx.json, a),
        Command::Approve(a) => approve::run(&ctx, a).await,
        Command::Deny(a) => deny::run(&ctx, a).await,
        Command::Stats(a) => stats::run(&ctx, a).await,
        Command::Prune(a) => prune::run(&ctx, a).await,
        Command::Status(a) => status::run(&ctx, a).await,
        Command::Schedule(a) => schedule::run(&ctx, a).await,
        Command::Pause(a) => pause::pause(&ctx, a).await,
        Command::Resume(a) => pause::resume(&ctx, a).await,
        Command::Check(a) => check::run(&ctx, a).await,
        Command::Web(a) => web::run(&ctx, a).await,
        Command::Completions(_) | Command::Man | Command::Config(_) => Ok(()),
    }
}

/// Runs the CLI and returns the process exit code: 0 ok, 1 operational error, 2 bad usage
/// or input. Errors go to stderr as `toolq: ...`.
pub fn main() -> i32 {
    main_with(RegistryBuilder::new())
}

/// The stock CLI with a host's own tools next to the built-in and configured ones: a host
/// ships its Rust tools as its own binary whose `main` is this call, and every command
/// (`worker`, `enqueue`, `tools`, ...) knows them. Returns the exit code, as [`main`].
///
/// ```no_run
/// use async_trait::async_trait;
/// use serde_json::json;
/// use toolq::{RegistryBuilder, Tool, ToolContext, ToolDef, ToolOutcome};
///
/// struct Greet;
///
/// #[async_trait]
/// impl Tool for Greet {
///     fn definition(&self) -> ToolDef {
///         ToolDef::new("greet", "Says hello", json!({"type": "object"}))
///     }
///     async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
///         ToolOutcome::ok(json!({"greeting": "hello"}))
///     }
/// }
///
/// fn main() {
///     std::process::exit(toolq::cli::main_with(RegistryBuilder::new().tool(Greet)));
/// }
/// ```
pub fn main_with(host: RegistryBuilder) -> i32 {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let code = e.exit_code();
            // `--help` or `--version` that could not be printed did not do its job.
            return match e.print() {
                Err(io) if code == 0 && io.kind() != std::io::ErrorKind::BrokenPipe => {
                    render::error(&Error::io("write to stdout", io));
                    1
                }
                _ => code,
            };
        }
    };
    let db_from_env = matches.value_source("db") == Some(clap::parser::ValueSource::EnvVariable);
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
    let outcome = runtime
        .block_on(dispatch(cli, host, db_from_env))
        .and_then(|()| render::finish());
    match outcome {
        Ok(()) => 0,
        Err(e) if render::is_reader_gone(&e) => 0,
        Err(e) => {
            let e = name_flags(e);
            render::error(&e);
            e.exit_code()
        }
    }
}

/// The library names request fields (`max_attempts`, `cron_expression`); on the command line
/// the user typed flags, so input errors about those fields name the flag instead.
fn name_flags(e: Error) -> Error {
    const FIELDS: &[&str] = &[
        "priority",
        "max_attempts",
        "timeout",
        "title",
        "session",
        "args",
        "idempotency_key",
        "catchup_window",
        "delivery",
        "count",
        "by",
        "limit",
        "unique_by",
        "unique_for",
        "unique_states",
        "batch_size",
    ];
    match e {
        Error::Input(mut ie) if FIELDS.contains(&ie.field.as_str()) => {
            ie.field = format!("--{}", ie.field.replace('_', "-"));
            Error::Input(ie)
        }
        Error::Input(mut ie) if ie.field == "schedule" => {
            ie.reason = "give exactly one of --cron (recurring) or --at (one-shot)".into();
            Error::Input(ie)
        }
        e => e,
    }
}

/// A filter flag's value (`--tool`, `--session`, ...), refused when empty or blank: no run has
/// an empty tool or session, so such a filter would list nothing and exit 0 as if there were
/// no such runs (and `enqueue --session ''` is refused the same way).
pub(crate) fn filter(flag: &str, value: Option<String>) -> Result<Option<String>, InputError> {
    match value {
        Some(v) if v.is_empty() => Err(InputError::new(
            flag,
            v,
            "must not be empty: a filter on an empty value matches nothing (leave the flag out to match all)",
        )),
        Some(v) if v.trim().is_empty() => Err(InputError::new(
            flag,
            v,
            "must not be blank: a filter on a blank value matches nothing (leave the flag out to match all)",
        )),
        v => Ok(v),
    }
}

/// A library error about one of the request's fields, shown with the text the user typed for
/// it: the library knows only the parsed value (`--timeout 0m` is echoed as "0m"). `typed`
/// pairs the library's field names with the flag values given.
pub(crate) fn as_typed(e: Error, typed: &[(&str, Option<&str>)]) -> Error {
    match e {
        Error::Input(mut ie) => {
            if let Some((_, Some(text))) = typed.iter().find(|(f, _)| *f == ie.field) {
                ie.value = (*text).to_string();
            }
            Error::Input(ie)
        }
        e => e,
    }
}

/// Parses a run id argument (exit 2 on a malformed id).
pub(crate) fn run_id(s: &str) -> Result<crate::ids::RunId> {
    Ok(s.parse()?)
}
