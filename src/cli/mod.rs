//! The operator CLI: `toolq [--db PATH] [--config PATH] [--json] COMMAND`. One file per
//! subcommand; each parses its flags, calls the library, and renders through [`render`].
//! [`args`] holds the command line's shape, `dispatch` routes a parsed command to its file,
//! and [`setup`] loads the configuration and tools a command runs with.

mod approve;
pub mod args;
mod batch;
mod bulk;
mod cancel;
mod check;
mod config;
mod deny;
mod dispatch;
mod enqueue;
mod generate;
mod inbox;
mod init;
pub(crate) mod input;
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
pub mod setup;
mod show;
mod signal;
mod stats;
mod status;
mod tools;
mod wait;
mod web;
mod worker;
mod worker_start;

use clap::{CommandFactory, FromArgMatches};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::tool::RegistryBuilder;
pub use args::{Cli, Command};
pub use setup::{load_config, registry, registry_with};

/// What every subcommand gets.
pub struct Ctx {
    /// The opened database with its tools.
    pub client: Client,
    /// `--json` was given.
    pub json: bool,
    /// The config file in use and how it was chosen, or "built-in defaults".
    pub config_file: String,
}

fn init_tracing(command: &Command) -> Result<()> {
    Ok(match command {
        Command::Worker(a) => logging::init(a.log_format, a.log.as_deref(), "info"),
        _ => logging::init(logging::LogFormat::Text, None, "warn"),
    }?)
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
        .block_on(dispatch::dispatch(cli, host, db_from_env))
        .and_then(|()| render::finish());
    match outcome {
        Ok(()) => 0,
        Err(e) if render::is_reader_gone(&e) => 0,
        Err(e) => {
            let e = input::name_flags(e);
            render::error(&e);
            e.exit_code()
        }
    }
}
