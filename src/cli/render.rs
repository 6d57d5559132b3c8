//! The only CLI code that prints: aligned tables for people, JSON for scripts, errors to stderr.
//!
//! Printing never panics. The first failed write to stdout is kept, and [`finish`] (called
//! once the command is done) or [`check`] (called by commands that print in a loop) turns it
//! into an error: a command that could not write its output exits 1 with a `toolq:` message,
//! except when the reader closed the pipe (`toolq runs | head -1`), which is a quiet exit
//! ([`is_reader_gone`]). Failed writes to stderr are dropped: there is nowhere left to report
//! them, and the exit code still tells.

use std::io::{self, Write};
use std::sync::Mutex;

use serde::Serialize;

use crate::error::Error;

/// Prints `value` as one pretty JSON document on stdout.
pub fn json<T: Serialize + ?Sized>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => line(&s),
        Err(e) => note(&format!("toolq: could not encode JSON: {e}")),
    }
}

/// Prints `value` as pretty JSON with every object's keys in sorted order, as a `json!` value
/// prints (the shape the CLI printed when it built these answers inline).
pub fn json_sorted<T: Serialize + ?Sized>(value: &T) {
    match serde_json::to_value(value) {
        Ok(v) => json(&v),
        Err(e) => note(&format!("toolq: could not encode JSON: {e}")),
    }
}

/// The first write to stdout that failed in this process, if any (kind and text).
static STDOUT_FAILED: Mutex<Option<(io::ErrorKind, String)>> = Mutex::new(None);

/// The action named in the error of a failed write to stdout.
const WRITE_STDOUT: &str = "write to stdout";

fn stdout_failed(e: io::Error) {
    let mut first = STDOUT_FAILED.lock().unwrap_or_else(|p| p.into_inner());
    if first.is_none() {
        *first = Some((e.kind(), e.to_string()));
    }
}

/// Prints one line on stdout; a failure is kept for [`check`] and [`finish`].
pub fn line(s: &str) {
    let mut out = io::stdout().lock();
    if let Err(e) = writeln!(out, "{s}") {
        stdout_failed(e);
    }
}

/// Prints raw text on stdout without adding a newline.
pub fn raw(s: &str) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        stdout_failed(e);
    }
}

/// Fails if a write to stdout has failed so far: commands that keep printing (`--follow`)
/// stop instead of printing into nothing.
pub fn check() -> Result<(), Error> {
    let first = STDOUT_FAILED.lock().unwrap_or_else(|p| p.into_inner());
    match &*first {
        Some((kind, text)) => Err(Error::io(WRITE_STDOUT, io::Error::new(*kind, text.clone()))),
        None => Ok(()),
    }
}

/// Flushes stdout, then fails like [`check`] if any write to it failed.
pub fn finish() -> Result<(), Error> {
    if let Err(e) = io::stdout().lock().flush() {
        stdout_failed(e);
    }
    check()
}

/// Whether `e` is a write to stdout that failed because the reader closed the pipe:
/// the reader has all it wanted, so the CLI exits quietly with the command's own status.
pub fn is_reader_gone(e: &Error) -> bool {
    matches!(e, Error::Io { action, source }
        if action == WRITE_STDOUT && source.kind() == io::ErrorKind::BrokenPipe)
}

/// Prints an error on stderr as `toolq: ...`.
pub fn error(e: &Error) {
    let _ = writeln!(io::stderr().lock(), "toolq: {e}");
}

/// Prints a note on stderr (never on stdout, so `--json` output stays clean).
pub fn note(s: &str) {
    let _ = writeln!(io::stderr().lock(), "{s}");
}

/// Prints rows as a table with aligned columns; cells are cut to `max` characters.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    const MAX: usize = 60;
    let cut = |s: &str| -> String {
        let one = visible(&s.replace(['\n', '\r', '\t'], " ")).into_owned();
        if one.chars().count() > MAX {
            format!("{}…", one.chars().take(MAX - 1).collect::<String>())
        } else {
            one
        }
    };
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| cut(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let fmt_row = |cells: Vec<String>| -> String {
        let n = cells.len();
        cells
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == n {
                    c
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    line(&fmt_row(headers.iter().map(|h| h.to_string()).collect()));
    for r in rows {
        line(&fmt_row(r));
    }
}

/// Prints `key: value` pairs with aligned keys.
pub fn fields(pairs: &[(&str, String)]) {
    let w = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in pairs {
        line(&format!("{k:<w$}  {}", visible(v)));
    }
}

/// `s` with control characters other than newline and tab written as escapes (`\x1b`): a
/// title or an error that an enqueuer wrote must not move the operator's cursor, recolour
/// the terminal or rewrite earlier lines.
/// The same escapes as a run's log (`logs`).
pub fn visible(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(|c: char| c.is_control() && c != '\n' && c != '\t') {
        std::borrow::Cow::Owned(crate::tool::sink::escape_bytes(s.as_bytes()))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// An optional value for display: the value or `-`.
pub fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// A compact timestamp for tables.
pub fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    crate::clock::ts(*t)
}

/// A duration for people: `350ms`, `4.2s`, `2m`, `2m 5s`, `1h 3m` (whole seconds from a
/// minute up, whole minutes from an hour up): [`crate::clock::format_elapsed`].
pub fn duration(d: std::time::Duration) -> String {
    crate::clock::format_elapsed(d)
}

/// A duration in milliseconds as stored (negative clamps to zero), for people.
pub fn millis(ms: i64) -> String {
    duration(std::time::Duration::from_millis(ms.max(0) as u64))
}

/// How long a run took (`finished - started`), or has been running (`now - started`).
pub fn run_duration(run: &crate::run::Run, now: chrono::DateTime<chrono::Utc>) -> Option<String> {
    // A run waiting (queued again, or for approval) is not running, whatever it did before.
    if matches!(
        run.state,
        crate::run::RunState::Queued | crate::run::RunState::AwaitingApproval
    ) {
        return None;
    }
    let started = run.started_at?;
    let end = run.finished_at.unwrap_or(now);
    let d = millis((end - started).num_milliseconds());
    Some(if run.finished_at.is_some() {
        d
    } else {
        format!("{d} so far")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(duration(Duration::from_millis(350)), "350ms");
        assert_eq!(duration(Duration::from_millis(4200)), "4.2s");
        assert_eq!(duration(Duration::from_secs(120)), "2m");
        assert_eq!(duration(Duration::from_secs(125)), "2m 5s");
        assert_eq!(duration(Duration::from_secs(3600 + 185)), "1h 3m");
        assert_eq!(millis(-5), "0ms");
    }

    #[test]
    fn control_characters_are_shown_as_escapes_but_lines_and_tabs_stay() {
        assert_eq!(visible("plain: ü, 日本"), "plain: ü, 日本");
        assert_eq!(visible("a\nb\tc"), "a\nb\tc");
        assert_eq!(
            visible("\u{1b}[31mred\u{1b}[0m\r\u{7f}\u{9b}"),
            "\\x1b[31mred\\x1b[0m\\x0d\\x7f\\x9b"
        );
    }
}
