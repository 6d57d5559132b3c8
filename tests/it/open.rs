//! Opening the database file (issue 17, items 8 and 11): which commands may create it, read
//! commands on a missing or read-only file, and many processes opening a new file at once.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::toolq;

fn cmd(db: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toolq"));
    c.arg("--db")
        .arg(db)
        .args(args)
        .env_remove("TOOLQ_CONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn processes_opening_a_new_file_at_once_all_succeed() {
    const ROUNDS: usize = 8;
    const PROCESSES: usize = 8;
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("new.db");
        let children: Vec<_> = (0..PROCESSES)
            .map(|i| {
                let args: &[&str] = match i % 4 {
                    0 => &["worker", "--drain"],
                    1 => &["enqueue", "echo", "--args", r#"{"message":"x"}"#],
                    2 => &["init"],
                    _ => &["schedule", "add", "--cron", "@hourly", "echo"],
                };
                (args, cmd(&db, args).spawn().unwrap())
            })
            .collect();
        for (args, child) in children {
            let o = child.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "round {round}: {args:?} exited {}: {}",
                o.status,
                stderr(&o)
            );
        }
        let o = toolq(&db, &["--json", "stats"]);
        assert!(o.status.success(), "round {round}: {}", stderr(&o));
        let c = rusqlite::Connection::open(&db).unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal", "round {round}");
        let runs: i64 = c
            .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(runs as usize, PROCESSES / 4, "round {round}");
    }
}
