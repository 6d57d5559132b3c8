//! From the parsed command line to the command's file: what it may do to the database
//! file, and what it needs opened first.

use clap::CommandFactory;

use super::args::{Cli, Command};
use super::setup::{load_config, registry_with};
use super::{
    Ctx, approve, batch, cancel, check, config, deny, enqueue, generate, inbox, init, logs, pause,
    prune, result, retry, runs, schedule, show, signal, stats, status, tools, wait, web, worker,
    worker_start,
};
use crate::client::Client;
use crate::error::Result;
use crate::store::OpenMode;
use crate::tool::RegistryBuilder;

/// Which commands may create the database file, and which only read it. Commands that add
/// work create a missing file; commands that change existing rows need it to exist; the
/// rest only read and open a file they may not write read-only.
fn open_mode(command: &Command) -> OpenMode {
    match command {
        Command::Init(_) | Command::Worker(_) | Command::Enqueue(_) => OpenMode::Create,
        Command::Batch(a) => match a.command {
            batch::Sub::Cancel(_) | batch::Sub::Retry(_) => OpenMode::Existing,
            batch::Sub::List(_) | batch::Sub::Show(_) | batch::Sub::Wait(_) => OpenMode::Read,
        },
        Command::Schedule(a) => match a.command {
            schedule::Sub::Add(_) => OpenMode::Create,
            schedule::Sub::Cancel(_) | schedule::Sub::Disable(_) | schedule::Sub::Enable(_) => {
                OpenMode::Existing
            }
            schedule::Sub::List(_) | schedule::Sub::Show(_) | schedule::Sub::Preview(_) => {
                OpenMode::Read
            }
        },
        Command::Cancel(_)
        | Command::Retry(_)
        | Command::Approve(_)
        | Command::Deny(_)
        | Command::Signal(_)
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
        Command::Completions(_) | Command::Man | Command::Openapi | Command::Config(_) => {
            OpenMode::Read
        }
    }
}

/// Runs the parsed command: those that need no configuration first, then those that need no
/// database, then the rest against the opened database.
pub(super) async fn dispatch(cli: Cli, host: RegistryBuilder, db_from_env: bool) -> Result<()> {
    match &cli.command {
        Command::Completions(a) => return generate::completions(a, Cli::command()),
        Command::Man => return generate::man(Cli::command()),
        Command::Openapi => {
            super::render::json(&crate::web::api::document());
            return super::render::finish();
        }
        _ => {}
    }
    let (config, layers) = load_config(&cli, db_from_env)?;
    let registry = registry_with(&config, host)?;
    // These need no database: they neither open nor create one.
    let command = match cli.command {
        Command::Tools(a) => return tools::run(&registry, cli.json, a),
        Command::Config(a) => {
            return config::run(&layers, &config, &registry.names(), cli.json, &a);
        }
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
    // Before the database opens, so a bad endpoint is refused before anything is written.
    let traces = crate::trace::init(&config.traces)?;
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
    let done = run(&ctx, command).await;
    // The exporter's shutdown joins its thread and may wait for one last export: off the
    // runtime's threads.
    if traces.is_on() {
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    done
}

/// Runs a command that needs the database.
async fn run(ctx: &Ctx, command: Command) -> Result<()> {
    match command {
        Command::Init(a) => init::run(ctx, a).await,
        Command::Worker(a) => worker::run(ctx, a).await,
        Command::Enqueue(a) => enqueue::run(ctx, *a).await,
        Command::Batch(a) => batch::run(ctx, a).await,
        Command::Runs(a) => runs::run(ctx, a).await,
        Command::Show(a) => show::run(ctx, a).await,
        Command::Wait(a) => wait::run(ctx, a).await,
        Command::Logs(a) => logs::run(ctx, a).await,
        Command::Result(a) => result::run(ctx, a).await,
        Command::Cancel(a) => cancel::run(ctx, a).await,
        Command::Retry(a) => retry::run(ctx, a).await,
        Command::Inbox(a) => inbox::run(ctx, a).await,
        Command::Tools(a) => tools::run(ctx.client.registry(), ctx.json, a),
        Command::Approve(a) => approve::run(ctx, a).await,
        Command::Deny(a) => deny::run(ctx, a).await,
        Command::Signal(a) => signal::run(ctx, a).await,
        Command::Stats(a) => stats::run(ctx, a).await,
        Command::Prune(a) => prune::run(ctx, a).await,
        Command::Status(a) => status::run(ctx, a).await,
        Command::Schedule(a) => schedule::run(ctx, a).await,
        Command::Pause(a) => pause::pause(ctx, a).await,
        Command::Resume(a) => pause::resume(ctx, a).await,
        Command::Check(a) => check::run(ctx, a).await,
        Command::Web(a) => web::run(ctx, a).await,
        Command::Completions(_) | Command::Man | Command::Openapi | Command::Config(_) => Ok(()),
    }
}
