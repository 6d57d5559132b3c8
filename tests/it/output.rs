//! A `toolq` process whose stdout or stderr cannot be written (issue 17, item 1): real
//! processes with stderr on /dev/full, stderr into a pipe closed after the first lines, stdout
//! on /dev/full and stdout into a closed pipe.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::toolq;

fn dev_full() -> File {
    OpenOptions::new().write(true).open("/dev/full").unwrap()
}

fn cmd(db: &crate::support::TestDb, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toolq"));
    c.arg("--db")
        .arg(db)
        .args(args)
        .env_remove("TOOLQ_CONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    c
}

fn enqueue_echo(db: &crate::support::TestDb) -> String {
    let o = toolq(db, &["enqueue", "echo", "--args", r#"{"message":"hi"}"#]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

fn state(db: &crate::support::TestDb, id: &str) -> String {
    db.text(&format!("SELECT state FROM runs WHERE id = '{id}'"))
        .unwrap()
}

fn wait_until(what: &str, child: &mut Child, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the worker exited ({status}) while waiting for {what}");
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn terminate(mut child: Child) -> ExitStatus {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the worker did not stop after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_worker_with_stderr_on_dev_full_works_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let id = enqueue_echo(&db);
    let mut worker = cmd(&db, &["worker", "--log", "toolq=debug"])
        .stdout(Stdio::null())
        .stderr(dev_full())
        .spawn()
        .unwrap();
    wait_until("the run to complete", &mut worker, || {
        state(&db, &id) == "completed"
    });
    // A run enqueued after the failed log writes is still claimed.
    let id2 = enqueue_echo(&db);
    wait_until("the second run to complete", &mut worker, || {
        state(&db, &id2) == "completed"
    });
    let status = terminate(worker);
    assert_eq!(status.code(), Some(0), "{status}");
}

#[test]
fn a_draining_worker_with_stderr_on_dev_full_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let id = enqueue_echo(&db);
    let status = cmd(&db, &["worker", "--drain"])
        .stdout(Stdio::null())
        .stderr(dev_full())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(state(&db, &id), "completed");
}

#[test]
fn a_worker_whose_stderr_pipe_closes_counts_the_lost_lines_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    enqueue_echo(&db);
    let mut worker = cmd(
        &db,
        &["worker", "--log", "toolq=debug", "--metrics", "127.0.0.1:0"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Read up to the line naming the metrics address, then close the pipe (like `| head`).
    let mut lines = BufReader::new(worker.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("a log line").unwrap();
        if let Some((_, rest)) = line.split_once("serving metrics at http://") {
            break rest.split('/').next().unwrap().to_string();
        }
    };
    drop(lines);
    // Every run now logs a debug line into the closed pipe.
    let id = enqueue_echo(&db);
    wait_until("the run after the close to complete", &mut worker, || {
        state(&db, &id) == "completed"
    });
    let body = ureq::get(format!("http://{addr}/metrics"))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    let lost: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("toolq_log_write_errors_total "))
        .unwrap_or_else(|| panic!("no toolq_log_write_errors_total in:\n{body}"))
        .trim()
        .parse()
        .unwrap();
    assert!(lost >= 1.0, "{body}");
    let status = terminate(worker);
    assert_eq!(status.code(), Some(0), "{status}");
}

#[test]
fn a_command_that_cannot_write_its_output_exits_1_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let id = enqueue_echo(&db);
    let cases: [&[&str]; 4] = [
        &["enqueue", "echo", "--args", r#"{"message":"lost"}"#],
        &["runs"],
        &["--json", "show", &id],
        &["stats"],
    ];
    for args in cases {
        let o = cmd(&db, args)
            .stdout(dev_full())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("toolq: ") && err.contains("stdout"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_command_with_stderr_on_dev_full_does_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let args = [
        "enqueue",
        "echo",
        "--args",
        r#"{"message":"k"}"#,
        "--idempotency-key",
        "k",
    ];
    let first = cmd(&db, &args).output().unwrap();
    assert!(first.status.success());
    // The second prints a note on stderr (the run already exists); a bad id prints an error.
    let o = cmd(&db, &args).stderr(dev_full()).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(o.stdout, first.stdout);
    let o = cmd(&db, &["show", "not-an-id"])
        .stderr(dev_full())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn stdout_closed_by_the_reader_is_a_quiet_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    for _ in 0..3 {
        enqueue_echo(&db);
    }
    // The read end is closed before the child writes: its first write gets EPIPE.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = cmd(&db, &["runs"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
}

#[test]
fn following_into_a_closed_pipe_stops() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let id = enqueue_echo(&db);
    assert!(toolq(&db, &["worker", "--drain"]).status.success());
    for args in [
        &["inbox", "default", "--follow"][..],
        &["logs", &id, "--follow"][..],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut child = cmd(&db, args)
            .stdout(writer)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{args:?} kept following into a closed pipe");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "{args:?}");
    }
}
