//! A worker whose Postgres server cannot be reached when it starts, and the lines it logs
//! during an outage (issue 40, item 5), through the real binary and a TCP proxy the test
//! cuts and restores: it waits with a backoff instead of exiting, says so once, starts when
//! the server answers; its outage line names the operation that failed, the database and the
//! cause, without the connection pool's detail-free warnings.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::postgres_outage::Proxy;
use crate::support::{Killed, TestDb, toolq, toolq_command, wait_until};

fn log(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_worker_started_while_the_server_is_unreachable_waits_for_it_and_then_works() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    assert!(toolq(&db.url, &["init"]).status.success());
    let proxy = Proxy::start();
    proxy.cut();
    let log_path = dir.path().join("worker.log");
    let mut worker = Killed(
        toolq_command()
            .args([
                "--db",
                &proxy.url(&db.url),
                "worker",
                "--poll-interval",
                "200ms",
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_until("the start-up line", || {
        log(&log_path).contains("cannot reach the database at start-up")
    });
    // Three seconds on, it is still waiting: attempts at 1 s and 2 s have failed too.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        worker.0.try_wait().unwrap().is_none(),
        "the worker exited: {}",
        log(&log_path)
    );
    let text = log(&log_path);
    assert_eq!(
        text.matches("cannot reach the database").count(),
        1,
        "one line, not one per attempt: {text}"
    );
    assert!(text.contains("db=postgres://"), "{text}");
    proxy.restore();
    wait_until("the worker started", || {
        log(&log_path).contains("the database answers; starting")
    });
    let o = toolq(
        &db.url,
        &["enqueue", "echo", "--args", r#"{"message":"after"}"#],
    );
    assert!(o.status.success());
    wait_until("the run completed", || {
        db.count("SELECT count(*) FROM runs WHERE state = 'completed'") == 1
    });

    // An outage while it runs: one line naming what failed, where and why.
    proxy.cut();
    wait_until("the outage line", || {
        log(&log_path).contains("database writes are failing")
    });
    proxy.restore();
    wait_until("the recovery line", || {
        log(&log_path).contains("database writes succeed again")
    });
    let text = log(&log_path);
    let line = text
        .lines()
        .find(|l| l.contains("database writes are failing"))
        .unwrap();
    assert!(
        line.contains("db=postgres://"),
        "names the database: {line}"
    );
    assert!(
        [
            "claiming runs",
            "looking for due schedules",
            "heartbeat",
            "rescue",
            "expiring",
            // The cut can fall between the last run's end commit and its answer.
            "attempt ends"
        ]
        .iter()
        .any(|op| line.contains(op)),
        "names the operation: {line}"
    );
    assert!(!line.contains("schedule tick"), "{line}");
    assert!(line.contains("error="), "names the cause: {line}");
    assert!(
        !text.contains("deadpool"),
        "the pool's own warnings are not repeated: {text}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = worker.0.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", log(&log_path));
}

#[test]
fn a_draining_worker_gives_up_on_an_unreachable_server_after_the_stall_timeout() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/x");
    let started = Instant::now();
    let o = toolq_command()
        .env("TOOLQ_WORKER__STALL_TIMEOUT", "2s")
        .args(["--db", &url, "worker", "--drain"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it waited before giving up: {err}"
    );
    assert!(
        err.contains("cannot reach the database at start-up"),
        "{err}"
    );
    assert!(err.contains("giving up"), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("toolq: "), "{err}");
    assert!(
        last.contains(&format!("127.0.0.1:{port}")) && last.to_lowercase().contains("refused"),
        "{err}"
    );
}

#[test]
fn a_worker_whose_login_is_refused_does_not_wait() {
    let s = crate::support::pg::server();
    let url = format!(
        "postgres://{}:wrong-Pa55@127.0.0.1:{}/postgres",
        crate::support::pg::PASSWORD_ROLE,
        s.port
    );
    let started = Instant::now();
    let o = toolq_command()
        .args(["--db", &url, "worker"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(!err.contains("cannot reach the database"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30), "{err}");
}
