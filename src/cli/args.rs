//! The command line's shape: the global flags and one subcommand, each with the flags its
//! own file defines. clap reads it; `completions` and `man` are generated from it.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use super::{
    approve, batch, cancel, check, config, deny, enqueue, generate, inbox, init, logs, pause,
    prune, result, retry, runs, schedule, show, signal, stats, status, tools, wait, web, worker,
};

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
        after_help = "Examples:\n  toolq enqueue echo --args '{\"message\":\"hi\"}' --session demo\n  toolq enqueue sleep --args '{\"ms\":5000}' --in 10m --priority 5\n  toolq enqueue --file runs.jsonl | xargs toolq wait\n  toolq enqueue echo --args '{\"message\":\"next\"}' --after bg_0193...\n  toolq enqueue --file dag.jsonl --batch --on-complete echo --on-complete-args '{\"message\":\"done\"}'"
    )]
    Enqueue(Box<enqueue::Args>),
    /// Batches: list, show, wait, cancel, retry.
    #[command(
        after_help = "Examples:\n  toolq enqueue --file runs.jsonl --batch --title nightly\n  toolq batch list --state running\n  toolq batch wait bt_0193... --timeout 1h"
    )]
    Batch(batch::Args),
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
    /// Send an event to a run: a run waiting for it resumes now; otherwise it is kept until
    /// the run waits for it. The first delivery of a name wins.
    #[command(
        after_help = "Examples:\n  toolq signal bg_0193... approved --payload '{\"by\":\"alice\"}'\n  toolq --json signal bg_0193... go"
    )]
    Signal(signal::Args),
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
    /// Print the HTTP API's OpenAPI 3.1 document (what `toolq web` serves at
    /// /api/v1/openapi.json; checked in as docs/openapi.json).
    #[command(after_help = "Examples:\n  toolq openapi > openapi.json")]
    Openapi,
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
