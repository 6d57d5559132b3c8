//! Tracing setup for the binary: text or JSON lines on stderr, filtered RUST_LOG-style.
//!
//! A log line that cannot be written (stderr on a full disk, a closed pipe) is dropped and
//! counted (`toolq_log_write_errors_total`), never an error: losing the log must not stop
//! the worker or its shutdown.

use std::io::{self, Write};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::error::InputError;

/// How log lines look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line, with the run span's fields (run_id, tool, session, attempt).
    Json,
}

/// Hands out [`LossyStderr`] writers to the subscriber.
#[derive(Debug, Clone, Copy, Default)]
pub struct LossyStderrMaker;

impl<'a> MakeWriter<'a> for LossyStderrMaker {
    type Writer = LossyStderr;

    fn make_writer(&'a self) -> Self::Writer {
        LossyStderr
    }
}

/// Stderr that swallows write errors: each failed write is counted and reported as done.
#[derive(Debug, Clone, Copy, Default)]
pub struct LossyStderr;

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match io::stderr().lock().write(buf) {
            Ok(n) => Ok(n),
            // write_all retries an interrupted write itself.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(_) => {
                crate::metrics::log_write_failed();
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        // Stderr is unbuffered; a failed flush has nothing left to lose.
        let _ = io::stderr().lock().flush();
        Ok(())
    }
}

/// Installs the global subscriber. The filter is `filter` (a `--log` flag) if given, else
/// `RUST_LOG`, else `default`; a malformed filter is an input error naming where it came from.
pub fn init(format: LogFormat, filter: Option<&str>, default: &str) -> Result<(), InputError> {
    let (field, spec) = match filter {
        Some(f) => ("--log", f.to_string()),
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.trim().is_empty() => ("RUST_LOG", v),
            _ => ("default", default.to_string()),
        },
    };
    let mut env_filter = EnvFilter::try_new(&spec).map_err(|e| {
        InputError::new(
            field,
            &spec,
            format!("is not a log filter like info or toolq=debug,warn ({e})"),
        )
    })?;
    // The connection pool's own warnings ("Connection error: db error") say neither which
    // operation failed nor why; the worker's outage line says both. A filter that names
    // deadpool still gets them.
    if !spec.contains("deadpool")
        && let Ok(quiet) = "deadpool=error".parse()
    {
        env_filter = env_filter.add_directive(quiet);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(LossyStderrMaker)
        // Its own report of a failed write goes to stderr with eprintln!, which panics when
        // stderr is what failed. LossyStderr never fails, this is belt and braces.
        .log_internal_errors(false);
    // A second init in one process (tests) keeps the first subscriber; that is fine.
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    Ok(())
}
