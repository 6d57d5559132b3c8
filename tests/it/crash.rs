//! Real `toolq worker` processes: SIGKILL at random moments with restarts (every run still
//! ends exactly once, recorded once), and several workers sharing one file (limits hold across
//! processes, no BUSY failure, no run claimed twice).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rusqlite::Connection;
use serde_json::json;
use toolq::{Client, Config, EnqueueRequest, RegistryBuilder};

struct Setup {
    _dir: tempfile::TempDir,
    db: PathBuf,
    config: PathBuf,
}

fn setup(config: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("toolq.db");
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, config).unwrap();
    Setup {
        db,
        config: cfg,
        _dir: dir,
    }
}

/// Enqueues `sleep` runs through the library: (session, ms, max_attempts) each.
fn enqueue_sleeps(db: &Path, runs: Vec<(String, u64, Option<i64>)>) {
    let config = Config {
        db_path: db.display().to_string(),
        ..Config::default()
    };
    let registry = RegistryBuilder::new().with_builtins().build().unwrap();
    let client = Client::open(config, registry).unwrap();
    let reqs = runs
        .into_iter()
        .map(|(session, ms, max_attempts)| {
            let mut r = EnqueueRequest::new("sleep", json!({ "ms": ms })).session(session);
            r.max_attempts = max_attempts;
            r
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(client.enqueue_batch(reqs)).unwrap();
}

fn spawn_worker(s: &Setup, drain: bool) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolq"));
    cmd.arg("--db")
        .arg(&s.db)
        .arg("--config")
        .arg(&s.config)
        .arg("worker");
    if drain {
        cmd.arg("--drain");
    }
    cmd.env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("worker starts")
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("worker did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn one(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn parse(ts: &str) -> DateTime<Utc> {
    toolq::store::codec::parse_ts(ts).unwrap()
}

/// The invariants every run must satisfy once the queue is drained.
fn assert_recorded_exactly_once(c: &Connection) {
    assert_eq!(
        one(
            c,
            "SELECT count(*) FROM runs WHERE state NOT IN ('completed', 'failed', 'cancelled')"
        ),
        0,
        "every run ends terminal"
    );
    assert_eq!(
        one(c, "SELECT count(*) FROM runs WHERE attempt > max_attempts"),
        0,
        "no run exceeds max_attempts"
    );
    assert_eq!(
        one(
            c,
            "SELECT count(*) FROM runs r WHERE (SELECT count(*) FROM blobs b \
             WHERE b.run_id = r.id AND b.path = '/.background/' || r.id || '/result.json') != 1"
        ),
        0,
        "each finished run has exactly one result blob"
    );
    assert_eq!(
        one(
            c,
            "SELECT count(*) FROM runs r WHERE (SELECT count(*) FROM inbox i WHERE i.run_id = r.id \
             AND i.kind IN ('completed', 'failed', 'cancelled')) != 1"
        ),
        0,
        "each finished run has exactly one final inbox row"
    );
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[test]
fn kill_9_at_random_moments_loses_nothing_and_records_each_run_once() {
    const RUNS: usize = 200;
    const KILLS: usize = 24;
    // A long lease: every rescue below comes from noticing the dead pid, not from expiry.
    let s = setup(
        "[worker]\npoll_interval = \"20ms\"\nheartbeat_interval = \"100ms\"\nlease = \"30s\"\n\
         flush_interval = \"50ms\"\ncancel_grace = \"100ms\"\nper_session = 2\n\
         [runs]\nbackoff_base = \"10ms\"\nbackoff_max = \"50ms\"\n",
    );
    let runs: Vec<_> = (0..RUNS)
        .map(|i| {
            (
                format!("s{}", i % 2),
                rand::random_range(10..=200u64),
                Some(5),
            )
        })
        .collect();
    enqueue_sleeps(&s.db, runs);
    let reader = Connection::open(&s.db).unwrap();
    let started = Instant::now();
    let mut kills = 0;
    let mut lost_in_flight = 0;
    let mut rescue_ms: Vec<i64> = Vec::new();
    let mut lost_attempts: Vec<(String, i64, DateTime<Utc>)> = Vec::new();
    let mut child = spawn_worker(&s, false);
    while kills < KILLS {
        let pid = child.id() as i64;
        // Most kills come a random while after the worker registered (so it holds runs even on
        // a loaded machine); every fourth may land anywhere, during start-up too.
        if kills % 4 != 3 {
            let deadline = Instant::now() + Duration::from_secs(20);
            while one(
                &reader,
                &format!("SELECT count(*) FROM workers WHERE pid = {pid}"),
            ) == 0
            {
                assert!(Instant::now() < deadline, "worker {pid} never registered");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        std::thread::sleep(Duration::from_millis(rand::random_range(50..=300u64)));
        child.kill().unwrap();
        let killed_at = Utc::now();
        child.wait().unwrap(); // reaped: its pid is gone, as after any real crash
        kills += 1;
        // The runs it held at the moment of death.
        let held: Vec<(String, i64)> = {
            let mut st = reader
                .prepare(
                    "SELECT r.id, r.attempt FROM runs r JOIN workers w ON w.id = r.lease_owner \
                     WHERE r.state = 'running' AND w.pid = ?1",
                )
                .unwrap();
            st.query_map([pid], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        lost_in_flight += held.len();
        child = spawn_worker(&s, false);
        // From the kill to each lost run's rescue (the "worker lost" entry the rescue appends
        // to its errors), and to its next start (after the backoff, behind older queued runs).
        let deadline = Instant::now() + Duration::from_secs(20);
        for (id, attempt) in &held {
            loop {
                let (state, errors): (String, String) = reader
                    .query_row("SELECT state, errors FROM runs WHERE id = ?1", [id], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .unwrap();
                let errors: serde_json::Value = serde_json::from_str(&errors).unwrap();
                let rescued_at = errors.as_array().unwrap().iter().find(|e| {
                    e["attempt"] == *attempt
                        && e["error"].as_str().unwrap().starts_with("worker lost")
                });
                if let Some(e) = rescued_at {
                    rescue_ms
                        .push((parse(e["at"].as_str().unwrap()) - killed_at).num_milliseconds());
                    lost_attempts.push((id.clone(), *attempt, killed_at));
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "run {id} was not rescued: {state} {errors}"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let mut drain = spawn_worker(&s, true);
    assert!(wait_exit(&mut drain, Duration::from_secs(60)).success());
    let elapsed = started.elapsed();

    assert_recorded_exactly_once(&reader);
    let completed = one(
        &reader,
        "SELECT count(*) FROM runs WHERE state = 'completed'",
    );
    let worker_lost = one(
        &reader,
        "SELECT count(*) FROM runs WHERE state = 'failed' AND error LIKE 'worker lost%'",
    );
    let other_failed = one(
        &reader,
        "SELECT count(*) FROM runs WHERE state = 'failed' AND error NOT LIKE 'worker lost%'",
    );
    let reexecuted = one(&reader, "SELECT count(*) FROM runs WHERE attempt > 1");
    let duplicate_inbox = one(
        &reader,
        "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) n FROM inbox \
         WHERE kind IN ('completed', 'failed', 'cancelled') GROUP BY run_id HAVING n > 1)",
    );
    let lost = one(
        &reader,
        "SELECT count(*) FROM runs WHERE state NOT IN ('completed', 'failed', 'cancelled')",
    );
    // The next start of a lost attempt, where that next attempt was the last one (a later
    // start overwrites started_at).
    let mut restart_ms: Vec<i64> = lost_attempts
        .iter()
        .filter_map(|(id, attempt, killed_at)| {
            let (att, st): (i64, String) = reader
                .query_row(
                    "SELECT attempt, started_at FROM runs WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            (att == attempt + 1).then(|| (parse(&st) - *killed_at).num_milliseconds())
        })
        .collect();
    rescue_ms.sort_unstable();
    restart_ms.sort_unstable();
    let pct = |v: &[i64], p: usize| {
        v.get(v.len().saturating_sub(1) * p / 100)
            .copied()
            .unwrap_or(-1)
    };
    eprintln!(
        "crash test: {kills} kills, {RUNS} runs, {completed} completed, {worker_lost} failed as \
         worker lost (5 attempts used), {other_failed} other failures, lost {lost}, \
         {lost_in_flight} attempts in flight at a kill, {reexecuted} runs executed more than once, \
         {duplicate_inbox} duplicate inbox rows; kill -9 to rescue: median {} ms, p90 {} ms, \
         max {} ms (n = {}); kill -9 to the rescued run's next start: median {} ms, p90 {} ms, \
         max {} ms (n = {}); {:.1}s in all",
        pct(&rescue_ms, 50),
        pct(&rescue_ms, 90),
        pct(&rescue_ms, 100),
        rescue_ms.len(),
        pct(&restart_ms, 50),
        pct(&restart_ms, 90),
        pct(&restart_ms, 100),
        restart_ms.len(),
        elapsed.as_secs_f64()
    );
    assert_eq!(lost, 0);
    assert_eq!(duplicate_inbox, 0);
    assert_eq!(other_failed, 0);
    assert!(kills >= 20);
    assert!(lost_in_flight > 0, "some kills hit runs in flight");
    assert_eq!(
        rescue_ms.len(),
        lost_in_flight,
        "every run in flight at a kill was rescued"
    );
    // Every dead worker was noticed and marked stopped by a successor.
    assert_eq!(
        one(
            &reader,
            "SELECT count(*) FROM workers WHERE stopped_at IS NULL"
        ),
        0
    );
    // (A worker killed before it registered left no row.)
    assert_eq!(
        one(
            &reader,
            "SELECT count(*) FROM workers WHERE stop_reason IS NOT 'died'"
        ),
        1,
        "only the draining worker exited cleanly"
    );
}

/// Runs `workers` worker processes over one file with `runs` short runs in 8 sessions and
/// checks the per-session limit (sampled from a reader), no BUSY failure, no double claim.
fn many_workers(workers: usize, runs: usize) {
    const PER_SESSION: i64 = 3;
    let s = setup(&format!(
        "[worker]\npoll_interval = \"20ms\"\nheartbeat_interval = \"200ms\"\nflush_interval = \"100ms\"\n\
         concurrency = 16\nper_session = {PER_SESSION}\n"
    ));
    let batch: Vec<_> = (0..runs)
        .map(|i| (format!("s{}", i % 8), rand::random_range(0..=3u64), None))
        .collect();
    enqueue_sleeps(&s.db, batch);
    let stop = Arc::new(AtomicBool::new(false));
    let max_running = Arc::new(AtomicI64::new(0));
    let samples = Arc::new(AtomicI64::new(0));
    let sampler = {
        let (stop, max_running, samples, db) = (
            stop.clone(),
            max_running.clone(),
            samples.clone(),
            s.db.clone(),
        );
        std::thread::spawn(move || {
            let c = Connection::open(db).unwrap();
            c.busy_timeout(Duration::from_secs(5)).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let n: i64 = c
                    .query_row(
                        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) n FROM runs \
                         WHERE state = 'running' GROUP BY session_id)",
                        [],
                        |r| r.get(0),
                    )
                    .unwrap();
                max_running.fetch_max(n, Ordering::Relaxed);
                samples.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let started = Instant::now();
    let mut children: Vec<Child> = (0..workers).map(|_| spawn_worker(&s, true)).collect();
    for c in &mut children {
        assert!(wait_exit(c, Duration::from_secs(60)).success());
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();

    let c = Connection::open(&s.db).unwrap();
    assert_recorded_exactly_once(&c);
    let by_state: HashMap<String, i64> = {
        let mut st = c
            .prepare("SELECT state, count(*) FROM runs GROUP BY state")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let busy = one(&c, "SELECT coalesce(sum(busy_retries), 0) FROM workers");
    let owners = one(
        &c,
        "SELECT count(DISTINCT w.id) FROM workers w WHERE w.stop_reason = 'exited'",
    );
    eprintln!(
        "{workers} workers, {runs} runs in {:.1}s: {by_state:?}; max running per session {} \
         (limit {PER_SESSION}, {} samples); busy retries {busy}",
        elapsed.as_secs_f64(),
        max_running.load(Ordering::Relaxed),
        samples.load(Ordering::Relaxed),
    );
    assert_eq!(
        by_state.get("completed").copied(),
        Some(runs as i64),
        "no run failed"
    );
    assert!(max_running.load(Ordering::Relaxed) <= PER_SESSION);
    assert!(samples.load(Ordering::Relaxed) > 0);
    // No worker died, so no run was ever rescued: each was claimed exactly once.
    assert_eq!(one(&c, "SELECT count(*) FROM runs WHERE attempt != 1"), 0);
    assert_eq!(one(&c, "SELECT count(*) FROM runs WHERE errors != '[]'"), 0);
    assert_eq!(owners, workers as i64, "every worker exited cleanly");
}

#[test]
fn two_worker_processes_share_one_file() {
    many_workers(2, 2000);
}

#[test]
fn four_worker_processes_share_one_file() {
    many_workers(4, 3000);
}

fn status(s: &Setup) -> (i32, serde_json::Value, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_toolq"))
        .arg("--db")
        .arg(&s.db)
        .arg("--config")
        .arg(&s.config)
        .args(["--json", "status", "--all"])
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    (
        o.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn liveness_of(v: &serde_json::Value, pid: i64) -> String {
    v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["pid"] == pid)
        .map(|w| w["liveness"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

#[test]
fn status_lists_workers_and_exits_1_when_a_live_loop_is_stale() {
    // Stale after 3 * 200ms + 500ms: roomy enough for a loaded machine.
    let s = setup("[worker]\npoll_interval = \"200ms\"\nheartbeat_interval = \"500ms\"\n");
    let mut worker = spawn_worker(&s, false);
    let pid = worker.id() as i64;
    let reader = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(c) = Connection::open(&s.db)
                && c.query_row(
                    "SELECT count(*) FROM workers WHERE pid = ?1 AND last_poll_at IS NOT NULL",
                    [pid],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap_or(0)
                    == 1
            {
                break c;
            }
            assert!(Instant::now() < deadline, "worker never polled");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let (code, v, err) = status(&s);
    assert_eq!(code, 0, "{err}");
    assert_eq!(liveness_of(&v, pid), "alive", "{v}");

    // A live process whose loop stopped polling a minute ago: status fails and says why.
    let mut hung = Command::new("sleep").arg("30").spawn().unwrap();
    let hung_pid = hung.id() as i64;
    let old = toolq::store::codec::ts(Utc::now() - chrono::Duration::minutes(1));
    let row = toolq::store::workers::WorkerRow {
        id: "wk_hung".into(),
        host: toolq::worker::identity::host(),
        boot_id: toolq::worker::identity::boot_id(),
        pid_namespace: toolq::worker::identity::pid_namespace(),
        pid: hung_pid,
        process_start_time: toolq::worker::identity::process_start_time(hung_pid as u32).unwrap(),
        started_at: old.clone(),
        heartbeat_at: old.clone(),
        last_poll_at: Some(old),
        stopped_at: None,
        stop_reason: None,
        concurrency: 1,
        poll_interval_ms: 20,
        heartbeat_interval_ms: 100,
        lease_ms: 30_000,
        busy_retries: 0,
        version: "test".into(),
    };
    toolq::Store::open(&s.db)
        .unwrap()
        .write(|tx| toolq::store::workers::register(tx, &row))
        .unwrap();
    let (code, v, err) = status(&s);
    assert_eq!(code, 1, "{v}");
    assert!(err.contains("1 live worker(s) stale"), "{err}");
    assert_eq!(liveness_of(&v, hung_pid), "stale", "{v}");
    assert_eq!(v["stale"], 1);

    // Once that process is gone the running worker's rescue marks the row stopped (died).
    hung.kill().unwrap();
    hung.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while reader
        .query_row(
            "SELECT stop_reason FROM workers WHERE id = 'wk_hung'",
            [],
            |r| r.get::<_, Option<String>>(0),
        )
        .unwrap()
        .is_none()
    {
        assert!(Instant::now() < deadline, "dead row never marked");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, v, err) = status(&s);
    assert_eq!(code, 0, "{err}");
    assert_eq!(liveness_of(&v, hung_pid), "stopped");

    // kill -9 the worker: with nobody left to mark it, status sees its pid gone.
    worker.kill().unwrap();
    worker.wait().unwrap();
    let (code, v, err) = status(&s);
    assert_eq!(code, 0, "{err}");
    assert_eq!(liveness_of(&v, pid), "dead", "{v}");
}

#[test]
fn a_surviving_worker_takes_back_a_killed_workers_runs_within_a_poll() {
    // Lease 30s: the survivor can only act this fast by noticing the dead pid.
    let s = setup(
        "[worker]\npoll_interval = \"50ms\"\nheartbeat_interval = \"100ms\"\nlease = \"30s\"\n\
         concurrency = 2\nper_session = 10\n[runs]\nbackoff_base = \"10ms\"\n",
    );
    enqueue_sleeps(
        &s.db,
        (0..4).map(|_| ("s".to_string(), 1500, None)).collect(),
    );
    let reader = Connection::open(&s.db).unwrap();
    let mut a = spawn_worker(&s, false);
    let mut b = spawn_worker(&s, false);
    let running_of = |pid: u32| -> i64 {
        reader
            .query_row(
                "SELECT count(*) FROM runs r JOIN workers w ON w.id = r.lease_owner \
                 WHERE r.state = 'running' AND w.pid = ?1",
                [pid],
                |r| r.get(0),
            )
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while running_of(a.id()) != 2 || running_of(b.id()) != 2 {
        assert!(
            Instant::now() < deadline,
            "both workers never held two runs"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    a.kill().unwrap();
    let killed_at = Utc::now();
    a.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let rescued_at = loop {
        let at: Option<String> = reader
            .query_row(
                "SELECT max(json_extract(e.value, '$.at')) FROM runs, json_each(runs.errors) e \
                 WHERE json_extract(e.value, '$.error') LIKE 'worker lost%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let n = one(&reader, "SELECT count(*) FROM runs WHERE errors != '[]'");
        if let (2, Some(at)) = (n, at) {
            break parse(&at);
        }
        assert!(Instant::now() < deadline, "survivor never rescued the runs");
        std::thread::sleep(Duration::from_millis(5));
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while one(
        &reader,
        "SELECT count(*) FROM runs WHERE state = 'completed'",
    ) != 4
    {
        assert!(
            Instant::now() < deadline,
            "survivor never finished the runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(b.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(wait_exit(&mut b, Duration::from_secs(20)).success());
    eprintln!(
        "survivor rescue: kill -9 to rescue by the other worker {} ms (poll interval 50 ms)",
        (rescued_at - killed_at).num_milliseconds()
    );
    assert_recorded_exactly_once(&reader);
    assert_eq!(
        one(&reader, "SELECT count(*) FROM runs WHERE attempt = 2"),
        2
    );
    assert_eq!(
        one(
            &reader,
            "SELECT count(*) FROM workers WHERE stop_reason = 'died'"
        ),
        1
    );
}
