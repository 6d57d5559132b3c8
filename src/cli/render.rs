//! The only CLI code that prints: aligned tables for people, JSON for scripts, errors to stderr.

use std::io::Write;

use serde::Serialize;

use crate::error::Error;

/// Prints `value` as one pretty JSON document on stdout.
pub fn json<T: Serialize + ?Sized>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => line(&s),
        Err(e) => eprintln!("toolq: could not encode JSON: {e}"),
    }
}

/// Prints one line on stdout (a closed pipe is not an error worth a panic).
pub fn line(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{s}");
}

/// Prints raw text on stdout without adding a newline.
pub fn raw(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes());
    let _ = out.flush();
}

/// Prints an error on stderr as `toolq: ...`.
pub fn error(e: &Error) {
    eprintln!("toolq: {e}");
}

/// Prints a note on stderr (never on stdout, so `--json` output stays clean).
pub fn note(s: &str) {
    eprintln!("{s}");
}

/// Prints rows as a table with aligned columns; cells are cut to `max` characters.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    const MAX: usize = 60;
    let cut = |s: &str| -> String {
        let one = s.replace(['\n', '\r', '\t'], " ");
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
        line(&format!("{k:<w$}  {v}"));
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
