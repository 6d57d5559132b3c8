//! Tracing setup for the binary: text or JSON lines on stderr, filtered RUST_LOG-style.

use tracing_subscriber::EnvFilter;

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
    let env_filter = EnvFilter::try_new(&spec).map_err(|e| {
        InputError::new(
            field,
            &spec,
            format!("is not a log filter like info or toolq=debug,warn ({e})"),
        )
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr);
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
