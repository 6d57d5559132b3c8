//! Real `toolq worker` processes killed with SIGKILL: at random moments with restarts (every
//! run still ends exactly once, recorded once), and under a surviving worker that takes the
//! dead one's runs back. The process helpers here are shared with `workers` and `status`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::support::TestDb;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::json;
use toolq::{Client, Config, EnqueueRequest, RegistryBuilder};

pub(crate) struct Setup {
    pub dir: tempfile::TempDir,
    pub db: TestDb,
    pub config: PathBuf,
}

pub(crate) fn setup(config: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, config).unwrap();
    Setup {
        db,
        config: cfg,
        dir,
    }
}

/// Enqueues `sleep` runs through the library: (session, ms, max_attempts) each.
pub(crate) fn enqueue_sleeps(db: &TestDb, runs: Vec<(String, u64, Option<i64>)>) {
    let reqs = runs
        .into_iter()
        .map(|(session, ms, max_attempts)| {
            let mut r = EnqueueRequest::new("sleep", json!({ "ms": ms })).session(session);
            r.max_attempts = max_attempts;
            r
        })
        .collect();
    enqueue_with(db, None, reqs);
}

/// Enqueues requests through the library, with the command tools of `config_file` if given.
pub(crate) fn enqueue_with(db: &TestDb, config_file: Option<&Path>, reqs: Vec<EnqueueRequest>) {
    let mut config = match config_file {
        Some(f) => Config::load(f).unwrap(),
        None => Config::default(),
    };
    db.configure(&mut config);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .with_config_tools(&config)
        .unwrap()
        .build()
        .unwrap();
    let client = Client::open(config, registry).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(client.enqueue_batch(reqs)).unwrap();
}

/// Starts `toolq worker` (with `--drain` if asked). Each process writes its own log file
/// `worker-PID.log` at debug level for `toolq::worker`: an append-only record, outside the
/// database, of every attempt it started (see [`executions`]).
pub(crate) fn spawn_worker(s: &Setup, drain: bool) -> Child {
    spawn_worker_on(s, drain, None)
}

/// [`spawn_worker`] with the host identity `host` (`worker.host_id`) when given: a worker
/// "on another machine" as far as rescue is concerned.
pub(crate) fn spawn_worker_on(s: &Setup, drain: bool, host: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolq"));
    if let Some(host) = host {
        cmd.env("TOOLQ_WORKER__HOST_ID", host);
    }
    cmd.arg("--db")
        .arg(&s.db)
        .arg("--config")
        .arg(&s.config)
        .arg("worker");
    if drain {
        cmd.arg("--drain");
    }
    let log_path = s
        .dir
        .path()
        .join(format!("starting-{}.log", rand::random::<u64>()));
    let log = std::fs::File::create(&log_path).unwrap();
    let child = cmd
        .env("RUST_LOG", "warn,toolq::worker=debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("worker starts");
    let named = s.dir.path().join(format!("worker-{}.log", child.id()));
    std::fs::rename(&log_path, named).unwrap();
    child
}

/// Executions started per run id, from every worker process's own log: the tool call starts
/// right after the `started` line of its attempt, so a run executed twice shows twice (a
/// process killed between its claim and that line may leave an attempt unlogged).
pub(crate) fn executions(s: &Setup) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for entry in std::fs::read_dir(s.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("worker-") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            if !line.ends_with("toolq::worker: started") {
                continue;
            }
            let id = line
                .split("run{run_id=")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .unwrap();
            *seen.entry(id.to_string()).or_insert(0) += 1;
        }
    }
    seen
}

pub(crate) fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
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

pub(crate) fn one(db: &TestDb, sql: &str) -> i64 {
    db.count(sql)
}

/// A stored timestamp: toolq's text format on SQLite, `timestamptz` as text on Postgres.
pub(crate) fn parse(ts: &str) -> DateTime<Utc> {
    toolq::store::codec::parse_ts(ts)
        .or_else(|| {
            DateTime::parse_from_str(ts, "%Y-%m-%d %H:%M:%S%.f%#z")
                .ok()
                .map(|t| t.with_timezone(&Utc))
        })
        .unwrap_or_else(|| panic!("not a timestamp: {ts}"))
}

/// The invariants every run must satisfy once the queue is drained.
pub(crate) fn assert_recorded_exactly_once(c: &TestDb) {
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
    if crate::support::ENGINE == crate::support::Engine::Sqlite {
        assert_eq!(c.text("PRAGMA integrity_check").as_deref(), Some("ok"));
    }
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
    let reader = &s.db;
    let started = Instant::now();
    let mut kills = 0;
    let mut lost_in_flight = 0;
    let mut ended_at_kill = 0;
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
                reader,
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
            reader
                .rows(&format!(
                    "SELECT r.id, r.attempt FROM runs r JOIN workers w ON w.id = r.lease_owner \
                     WHERE r.state = 'running' AND w.pid = {pid}"
                ))
                .into_iter()
                .map(|r| {
                    (
                        r[0].clone().unwrap(),
                        r[1].as_ref().unwrap().parse().unwrap(),
                    )
                })
                .collect()
        };
        lost_in_flight += held.len();
        child = spawn_worker(&s, false);
        // From the kill to each lost run's rescue (the "worker lost" entry the rescue appends
        // to its errors), and to its next start (after the backoff, behind older queued runs).
        let deadline = Instant::now() + Duration::from_secs(20);
        for (id, attempt) in &held {
            loop {
                let row = reader.rows(&format!(
                    "SELECT state, errors, attempt FROM runs WHERE id = '{id}'"
                ));
                let (state, errors) = (row[0][0].clone().unwrap(), row[0][1].clone().unwrap());
                let now_attempt: i64 = row[0][2].as_ref().unwrap().parse().unwrap();
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
                if state == "completed" && now_attempt == *attempt {
                    // Its end was already on its way: a Postgres server finishes a COMMIT the
                    // worker sent before it died, after this read of what it held. Not lost.
                    ended_at_kill += 1;
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

    assert_recorded_exactly_once(reader);
    let completed = one(
        reader,
        "SELECT count(*) FROM runs WHERE state = 'completed'",
    );
    let worker_lost = one(
        reader,
        "SELECT count(*) FROM runs WHERE state = 'failed' AND error LIKE 'worker lost%'",
    );
    let other_failed = one(
        reader,
        "SELECT count(*) FROM runs WHERE state = 'failed' AND error NOT LIKE 'worker lost%'",
    );
    let reexecuted = one(reader, "SELECT count(*) FROM runs WHERE attempt > 1");
    let duplicate_inbox = one(
        reader,
        "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) n FROM inbox \
         WHERE kind IN ('completed', 'failed', 'cancelled') GROUP BY run_id HAVING count(*) > 1) d",
    );
    let lost = one(
        reader,
        "SELECT count(*) FROM runs WHERE state NOT IN ('completed', 'failed', 'cancelled')",
    );
    // The next start of a lost attempt, where that next attempt was the last one (a later
    // start overwrites started_at).
    let mut restart_ms: Vec<i64> = lost_attempts
        .iter()
        .filter_map(|(id, attempt, killed_at)| {
            let row = reader.rows(&format!(
                "SELECT attempt, started_at FROM runs WHERE id = '{id}'"
            ));
            let att: i64 = row[0][0].as_ref().unwrap().parse().unwrap();
            let st = row[0][1].clone().unwrap();
            (att == attempt + 1).then(|| (parse(&st) - *killed_at).num_milliseconds())
        })
        .collect();
    rescue_ms.sort_unstable();
    restart_ms.sort_unstable();
    // Executions from the workers' own logs: never more than the attempts the database counts.
    let execs = executions(&s);
    let attempts: HashMap<String, i64> = {
        reader
            .rows("SELECT id, attempt FROM runs")
            .into_iter()
            .map(|r| {
                (
                    r[0].clone().unwrap(),
                    r[1].as_ref().unwrap().parse().unwrap(),
                )
            })
            .collect()
    };
    for (id, n) in &execs {
        assert!(
            *n as i64 <= attempts[id],
            "run {id}: {n} executions, {} attempts",
            attempts[id]
        );
    }
    let logged = execs.values().sum::<usize>();
    let duplicate_executions: usize = execs.values().map(|n| n - 1).sum();
    let pct = |v: &[i64], p: usize| {
        v.get(v.len().saturating_sub(1) * p / 100)
            .copied()
            .unwrap_or(-1)
    };
    eprintln!(
        "crash test: {kills} kills, {RUNS} runs, {completed} completed, {worker_lost} failed as \
         worker lost (5 attempts used), {other_failed} other failures, lost {lost}, \
         {lost_in_flight} attempts in flight at a kill ({ended_at_kill} of them ended by a \
         commit already sent), {reexecuted} runs with more than one \
         attempt, {logged} executions logged of which {duplicate_executions} repeats (all after a \
         rescue), {duplicate_inbox} duplicate inbox rows; kill -9 to rescue: median {} ms, p90 {} ms, \
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
        rescue_ms.len() + ended_at_kill,
        lost_in_flight,
        "every run in flight at a kill was rescued (or its end committed as the worker died)"
    );
    // Every dead worker was noticed and marked stopped by a successor.
    assert_eq!(
        one(
            reader,
            "SELECT count(*) FROM workers WHERE stopped_at IS NULL"
        ),
        0
    );
    // (A worker killed before it registered left no row.)
    assert_eq!(
        one(
            reader,
            "SELECT count(*) FROM workers WHERE stop_reason IS DISTINCT FROM 'died'"
        ),
        1,
        "only the draining worker exited cleanly"
    );
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
    let reader = &s.db;
    let mut a = spawn_worker(&s, false);
    let mut b = spawn_worker(&s, false);
    let running_of = |pid: u32| -> i64 {
        reader.count(&format!(
            "SELECT count(*) FROM runs r JOIN workers w ON w.id = r.lease_owner \
             WHERE r.state = 'running' AND w.pid = {pid}"
        ))
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
        let at = worker_lost_at(reader).into_iter().max();
        let n = one(reader, "SELECT count(*) FROM runs WHERE errors != '[]'");
        if let (2, Some(at)) = (n, at) {
            break at;
        }
        assert!(Instant::now() < deadline, "survivor never rescued the runs");
        std::thread::sleep(Duration::from_millis(5));
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while one(
        reader,
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
    assert_recorded_exactly_once(reader);
    assert_eq!(
        one(reader, "SELECT count(*) FROM runs WHERE attempt = 2"),
        2
    );
    assert_eq!(
        one(
            reader,
            "SELECT count(*) FROM workers WHERE stop_reason = 'died'"
        ),
        1
    );
}

/// When each "worker lost" entry in the runs' errors was written.
fn worker_lost_at(db: &TestDb) -> Vec<DateTime<Utc>> {
    db.column("SELECT errors FROM runs")
        .iter()
        .flat_map(|e| {
            let v: serde_json::Value = serde_json::from_str(e).unwrap();
            v.as_array().cloned().unwrap_or_default()
        })
        .filter(|e| {
            e["error"]
                .as_str()
                .is_some_and(|m| m.starts_with("worker lost"))
        })
        .map(|e| parse(e["at"].as_str().unwrap()))
        .collect()
}
