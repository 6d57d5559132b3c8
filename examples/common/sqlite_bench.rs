//! What `sqlite_limit` and `sqlite_floor` share: a fresh WAL file per figure, the benchmark's
//! job payload, and the command line (`<dir> <n>`) with its one JSON line of output.

use std::path::Path;
use std::process::ExitCode;

use rusqlite::Connection;
use serde_json::{Value, json};

/// A new WAL database `name` in `dir` (any earlier one and its `-wal`/`-shm` removed), with
/// toolq's default durability, synchronous NORMAL.
pub fn fresh_wal(dir: &Path, name: &str) -> rusqlite::Result<Connection> {
    let path = dir.join(name);
    for s in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{s}", path.display()));
    }
    let c = Connection::open(&path)?;
    let mode: String = c.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    assert_eq!(mode, "wal", "journal_mode did not take");
    c.execute_batch("PRAGMA synchronous = NORMAL;")?;
    Ok(c)
}

/// Job `i`'s payload, the same for every figure.
pub fn payload(i: usize) -> String {
    format!(r#"{{"kind":"noop","i":{i},"pad":"0123456789abcdef"}}"#)
}

/// Reads `<dir> <n>`, runs `figures` (a JSON object) and prints it as one JSON line with the
/// mode, `n` and the durability settings; exit 2 on bad arguments, 1 when a measurement failed.
pub fn run_main(
    program: &str,
    mode: &str,
    figures: impl FnOnce(&Path, usize) -> rusqlite::Result<Value>,
) -> ExitCode {
    let v: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), Some(n)) = (v.first(), v.get(1).and_then(|n| n.parse::<usize>().ok())) else {
        eprintln!("usage: {program} <dir> <n>");
        return ExitCode::from(2);
    };
    match figures(Path::new(dir), n) {
        Ok(Value::Object(mut line)) => {
            for (k, v) in [
                ("mode", json!(mode)),
                ("n", json!(n)),
                ("journal_mode", json!("wal")),
                ("synchronous", json!("NORMAL")),
                ("sqlite", json!(rusqlite::version())),
            ] {
                line.insert(k.into(), v);
            }
            println!("{}", Value::Object(line));
            ExitCode::SUCCESS
        }
        Ok(other) => {
            eprintln!("{program}: figures are not a JSON object: {other}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::from(1)
        }
    }
}
