//! Storage faults met by real `toolq` processes on real files: a damaged page of the runs
//! table, a database that cannot grow (SQLITE_FULL through `TOOLQ_MAX_PAGE_COUNT`), and the
//! lease warnings of a plain drain.

use std::io::{Seek, SeekFrom, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::json;
use toolq::EnqueueRequest;

use crate::crash::{Setup, enqueue_sleeps, enqueue_with, setup, spawn_worker, wait_exit};
use crate::support::TestDb;

fn one(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// `n` queued `sleep 0` runs over a few sessions.
fn queue(db: &TestDb, n: usize) {
    enqueue_sleeps(
        db,
        (0..n).map(|i| (format!("s{}", i % 50), 0, None)).collect(),
    );
}

/// Every log line the worker processes of `s` wrote.
fn worker_logs(s: &Setup) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(s.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("worker-") {
            all.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    all
}

/// Writes `bytes` over the file at `offset`, as `dd ... conv=notrunc` does.
fn overwrite(db: &std::path::Path, offset: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(db).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

/// Copies every WAL frame into the file and empties the WAL, so damage to the file is not
/// covered by a newer copy of the page in the WAL.
fn checkpoint_all(c: &Connection) {
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
}

/// Overwrites one page in the middle of the runs table's b-tree with random bytes, as
/// `dd if=/dev/urandom of=q.db bs=4096 seek=N count=1 conv=notrunc` does.
fn corrupt_a_runs_page(db: &TestDb) -> i64 {
    let db = db.file();
    let (page, size) = {
        let c = Connection::open(db).unwrap();
        checkpoint_all(&c);
        let leaves = one(
            &c,
            "SELECT count(*) FROM dbstat WHERE name = 'runs' AND pagetype = 'leaf'",
        );
        assert!(leaves > 10, "runs has only {leaves} leaf pages");
        let page: i64 = c
            .query_row(
                "SELECT pageno FROM dbstat WHERE name = 'runs' AND pagetype = 'leaf' \
                 ORDER BY pageno LIMIT 1 OFFSET ?1",
                [leaves / 2],
                |r| r.get(0),
            )
            .unwrap();
        (page, one(&c, "PRAGMA page_size"))
    };
    let noise: Vec<u8> = (0..size).map(|_| rand::random::<u8>()).collect();
    overwrite(db, ((page - 1) * size) as u64, &noise);
    page
}

#[test]
fn a_damaged_runs_page_stops_the_drain_with_exit_1_naming_the_file() {
    let s = setup("[worker]\npoll_interval = \"50ms\"\n");
    queue(&s.db, 6000);
    corrupt_a_runs_page(&s.db);
    let mut w = spawn_worker(&s, true);
    let status = wait_exit(&mut w, Duration::from_secs(60));
    let logs = worker_logs(&s);
    assert_eq!(status.code(), Some(1), "{logs}");
    let last = logs.lines().last().unwrap_or_default();
    assert!(last.starts_with("toolq: "), "{logs}");
    assert!(last.contains(&s.db.url), "{last}");
    assert!(
        last.contains("toolq --db") && last.contains("check"),
        "{last}"
    );
    assert!(last.contains("backup"), "{last}");
}

sqlite_only! {
    #[test]
    fn sqlite_only_a_damaged_header_is_named_as_damage_by_every_command() {
        let s = setup("");
        queue(&s.db, 10);
        checkpoint_all(&Connection::open(s.db.file()).unwrap());
        // Bytes 100-399 of page 1: the schema table's page header and cells.
        overwrite(s.db.file(), 100, &[0xab; 300]);
        for args in [&["runs"][..], &["stats"], &["status"], &["worker", "--drain"]] {
            let o = crate::support::toolq(&s.db, args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains("is damaged") && err.contains("backup"), "{args:?}: {err}");
        }
    }
}

sqlite_only! {
    /// `stats` and `status` are how an operator looks into a full disk: the checkpoint they
    /// run (a write) fails, and they report that instead of failing with it.
    #[test]
    fn sqlite_only_stats_and_status_report_a_checkpoint_the_disk_refuses() {
        let s = setup("");
        queue(&s.db, 5);
        // ~2 MB of WAL that a checkpoint would copy into the file, kept in the WAL by this
        // open connection (no checkpoint on close while it lives).
        let c = Connection::open(s.db.file()).unwrap();
        c.execute_batch(
            "PRAGMA wal_autocheckpoint = 0; CREATE TABLE pad (x BLOB); \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) \
             INSERT INTO pad SELECT randomblob(1000) FROM n;",
        )
        .unwrap();
        let size = std::fs::metadata(s.db.file()).unwrap().len();
        assert!(size < 1_000_000, "{size}");
        for args in [&["stats"][..], &["--json", "status"]] {
            // No file may grow past 1 MB (the disk is full for the checkpoint); the ignored
            // SIGXFSZ, inherited through exec, turns the refusal into a write error.
            let mut cmd = std::process::Command::new("sh");
            cmd.arg("-c")
                .arg("trap '' XFSZ; ulimit -f 2000; exec \"$@\"")
                .arg("sh")
                .arg(env!("CARGO_BIN_EXE_toolq"))
                .arg("--db")
                .arg(s.db.file())
                .args(args)
                .env_remove("RUST_LOG");
            let o = cmd.output().unwrap();
            let out = String::from_utf8_lossy(&o.stdout);
            let err = String::from_utf8_lossy(&o.stderr);
            // `status` exits 1 for the queued runs with no live worker, never for the WAL.
            assert_eq!(o.status.code(), Some(if args[0] == "stats" { 0 } else { 1 }), "{args:?}: {err}");
            assert!(
                format!("{out}{err}").contains("the WAL could not be checkpointed"),
                "{args:?}: {out} {err}"
            );
            if args[0] == "stats" {
                assert!(out.contains("queued             5"), "{out}");
            } else {
                let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                assert_eq!(v["queued_runs"], 5, "{v}");
            }
        }
        drop(c);
    }
}

#[test]
fn check_reports_ok_on_a_good_file_and_each_problem_on_a_damaged_one() {
    let s = setup("");
    queue(&s.db, 2000);
    let ok = crate::support::toolq(&s.db, &["check"]);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "ok");
    let quick = crate::support::toolq(&s.db, &["check", "--quick"]);
    assert_eq!(quick.status.code(), Some(0), "{quick:?}");
    let js = crate::support::toolq(&s.db, &["--json", "check"]);
    let v: serde_json::Value = serde_json::from_slice(&js.stdout).unwrap();
    assert_eq!(v, json!({"ok": true, "quick": false, "problems": []}));

    corrupt_a_runs_page(&s.db);
    for args in [&["check"][..], &["check", "--quick"]] {
        let bad = crate::support::toolq(&s.db, args);
        assert_eq!(bad.status.code(), Some(1), "{args:?}: {bad:?}");
        let out = String::from_utf8_lossy(&bad.stdout);
        assert!(!out.lines().any(|l| l == "ok"), "{out}");
        assert!(out.lines().count() >= 1, "{out}");
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(
            err.starts_with("toolq: ") && err.contains(&s.db.url),
            "{err}"
        );
    }
    let js = crate::support::toolq(&s.db, &["--json", "check"]);
    assert_eq!(js.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&js.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(!v["problems"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn a_database_that_cannot_grow_ends_the_drain_with_exit_1_and_logs_the_state_once() {
    let s = setup(
        "[worker]\npoll_interval = \"50ms\"\nheartbeat_interval = \"20ms\"\nstall_timeout = \"2s\"\n",
    );
    // Runs that each write a result: the file must grow to record their ends.
    let reqs = (0..400)
        .map(|i| {
            EnqueueRequest::new(
                "echo",
                json!({"message": format!("{i}:{}", "x".repeat(2000))}),
            )
        })
        .collect();
    enqueue_with(&s.db, None, reqs);
    let pages = {
        let c = Connection::open(s.db.file()).unwrap();
        c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        one(&c, "PRAGMA page_count")
    };
    let log = std::fs::File::create(s.dir.path().join("worker-full.log")).unwrap();
    let mut w = std::process::Command::new(env!("CARGO_BIN_EXE_toolq"))
        .arg("--db")
        .arg(&s.db)
        .arg("--config")
        .arg(&s.config)
        .args(["worker", "--drain"])
        .env("TOOLQ_MAX_PAGE_COUNT", (pages + 2).to_string())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let status = wait_exit(&mut w, Duration::from_secs(60));
    let logs = worker_logs(&s);
    assert_eq!(status.code(), Some(1), "{logs}");
    // One line when writes start failing and one when they succeed again: with two spare pages
    // a few writes may still go through, so the state can clear and fail again, but never
    // report the same state twice in a row.
    let mut failing = false;
    let mut changes = 0;
    for l in logs.lines() {
        if l.contains("database writes are failing") {
            assert!(!failing, "failing logged twice in a row:\n{logs}");
            failing = true;
            changes += 1;
        } else if l.contains("database writes succeed again") {
            assert!(failing, "a clear without a failure before it:\n{logs}");
            failing = false;
        }
    }
    assert!(changes >= 1, "no failing state logged:\n{logs}");
    assert!(!logs.contains("rescued a run"), "{logs}");
    assert!(!logs.contains("heartbeat failed"), "{logs}");
    let last = logs.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("toolq: ") && last.contains(&s.db.url),
        "{last}"
    );
    assert!(last.contains("full"), "{last}");
}

#[test]
fn a_plain_drain_with_fast_heartbeats_warns_of_no_lost_lease() {
    let s = setup("[worker]\nheartbeat_interval = \"1ms\"\npoll_interval = \"20ms\"\n");
    queue(&s.db, 2000);
    let mut w = spawn_worker(&s, true);
    let status = wait_exit(&mut w, Duration::from_secs(120));
    let logs = worker_logs(&s);
    assert_eq!(status.code(), Some(0), "{logs}");
    let c = Connection::open(s.db.file()).unwrap();
    assert_eq!(
        one(&c, "SELECT count(*) FROM runs WHERE state = 'completed'"),
        2000
    );
    let lost: Vec<&str> = logs.lines().filter(|l| l.contains("lease lost")).collect();
    assert!(
        lost.is_empty(),
        "{} false warnings: {:?}",
        lost.len(),
        &lost[..lost.len().min(3)]
    );
}

#[test]
fn a_run_taken_over_elsewhere_still_warns_lease_lost() {
    let s = setup("[worker]\nheartbeat_interval = \"20ms\"\npoll_interval = \"20ms\"\n");
    enqueue_sleeps(&s.db, vec![("s".into(), 60_000, None)]);
    let mut w = spawn_worker(&s, false);
    let c = Connection::open(s.db.file()).unwrap();
    c.busy_timeout(Duration::from_secs(5)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while one(&c, "SELECT count(*) FROM runs WHERE state = 'running'") == 0 {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Another worker rescued and re-claimed it: a new owner, attempt and lease token.
    c.execute(
        "UPDATE runs SET lease_owner = 'wk_elsewhere', lease_token = 'other', attempt = attempt + 1 \
         WHERE state = 'running'",
        [],
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !worker_logs(&s).contains("lease lost") {
        assert!(Instant::now() < deadline, "no warning: {}", worker_logs(&s));
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = w.kill();
    let _ = w.wait();
}
