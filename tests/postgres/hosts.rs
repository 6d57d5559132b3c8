//! Many hosts on one Postgres database: worker processes with different host identities
//! (`TOOLQ_WORKER__HOST_ID`) share the queue without double claims and with the per-session
//! limit holding across them; a host that stops heartbeating has its runs rescued by another
//! once their lease expires (never before: its pid means nothing on another host), and its late
//! finish is fenced out.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::crash::{
    Setup, assert_recorded_exactly_once, enqueue_sleeps, executions, parse, setup, spawn_worker_on,
    wait_exit,
};
use crate::support::{Killed, wait_until};

/// All `runs` runs completed with one message each, and no double claim: one attempt per run in
/// the database, at most one execution per run in the workers' own logs. Returns the
/// executions by run.
fn assert_each_run_completed_once(s: &Setup, runs: usize) -> HashMap<String, usize> {
    assert_recorded_exactly_once(&s.db);
    assert_eq!(
        s.db.count("SELECT count(*) FROM runs WHERE state = 'completed'"),
        runs as i64
    );
    assert_eq!(
        s.db.count("SELECT count(*) FROM runs WHERE attempt <> 1"),
        0
    );
    let execs = executions(s);
    let repeated: Vec<_> = execs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "executed more than once: {repeated:?}");
    execs
}

fn signal(child: &std::process::Child, sig: Signal) {
    kill(Pid::from_raw(child.id() as i32), sig).unwrap();
}

#[test]
fn three_hosts_drain_thousands_of_runs_with_no_double_claim_and_one_session_limit() {
    const RUNS: usize = 3000;
    const PER_SESSION: i64 = 2;
    let s = setup(
        "[worker]\nconcurrency = 8\nper_session = 2\npoll_interval = \"20ms\"\n\
         heartbeat_interval = \"200ms\"\nlease = \"30s\"\n",
    );
    enqueue_sleeps(
        &s.db,
        (0..RUNS)
            .map(|i| (format!("s{}", i % 40), (i % 3) as u64, None))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (most, samples) = (Arc::new(AtomicI64::new(0)), Arc::new(AtomicI64::new(0)));
    let sampler = {
        let (stop, most, samples, db) = (stop.clone(), most.clone(), samples.clone(), s.db.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = db.count(
                    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) n FROM runs \
                     WHERE state = 'running' GROUP BY session_id) per_session",
                );
                most.fetch_max(n, Ordering::Relaxed);
                samples.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let started = Instant::now();
    let mut workers: Vec<Killed> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|h| Killed(spawn_worker_on(&s, true, Some(h))))
        .collect();
    for w in &mut workers {
        assert!(wait_exit(&mut w.0, Duration::from_secs(300)).success());
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();

    let execs = assert_each_run_completed_once(&s, RUNS);
    // Which host ran how many, from each worker's log (named by pid) and the workers table.
    let by_host: HashMap<String, usize> =
        s.db.rows("SELECT host, pid FROM workers")
            .into_iter()
            .map(|r| {
                let log = s
                    .dir
                    .path()
                    .join(format!("worker-{}.log", r[1].as_ref().unwrap()));
                let started = std::fs::read_to_string(log)
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.ends_with("toolq::worker: started"))
                    .count();
                (r[0].clone().unwrap(), started)
            })
            .collect();
    let hosts =
        s.db.column("SELECT DISTINCT host FROM workers ORDER BY host");
    eprintln!(
        "many hosts: {RUNS} runs on 3 hosts in {:.1}s; runs by host {by_host:?}; \
         {} executions logged; most running in one session {} (limit {PER_SESSION}) over {} samples",
        elapsed.as_secs_f64(),
        execs.values().sum::<usize>(),
        most.load(Ordering::Relaxed),
        samples.load(Ordering::Relaxed)
    );
    assert_eq!(hosts, ["host-a", "host-b", "host-c"]);
    assert!(samples.load(Ordering::Relaxed) > 1);
    assert!(
        most.load(Ordering::Relaxed) <= PER_SESSION,
        "{} runs of one session running at once across hosts (limit {PER_SESSION})",
        most.load(Ordering::Relaxed)
    );
}

/// The benchmark's shape under the limits: four processes with free slots, one session whose
/// limit (4) is all of one process's slots, and a tool limited to 3 running. The processes left
/// without slots see from their unlocked look that nothing is claimable and wait for a wake
/// instead of queueing on the claim lock; the limits still hold across processes, the queue
/// drains, and no run is claimed twice.
#[test]
fn four_processes_on_one_session_at_its_limit_keep_both_limits_and_claim_nothing_twice() {
    const RUNS: usize = 600;
    let s = setup(
        "[worker]\nconcurrency = 4\nper_session = 4\npoll_interval = \"20ms\"\n\
         heartbeat_interval = \"200ms\"\nlease = \"30s\"\n[limits.sleep]\nmax_running = 3\n",
    );
    // Two thirds `sleep` (limited to 3), a third `echo` (only the session limit binds).
    let reqs = (0..RUNS)
        .map(|i| match i % 3 {
            0 => toolq::EnqueueRequest::new("echo", serde_json::json!({"message": "x"})),
            _ => toolq::EnqueueRequest::new("sleep", serde_json::json!({"ms": (i % 4) as u64})),
        })
        .map(|r| r.session("one"))
        .collect();
    crate::crash::enqueue_with(&s.db, Some(&s.config), reqs);
    let stop = Arc::new(AtomicBool::new(false));
    let (session_most, tool_most, samples) = (
        Arc::new(AtomicI64::new(0)),
        Arc::new(AtomicI64::new(0)),
        Arc::new(AtomicI64::new(0)),
    );
    let sampler = {
        let (stop, session_most, tool_most, samples, db) = (
            stop.clone(),
            session_most.clone(),
            tool_most.clone(),
            samples.clone(),
            s.db.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let row = db.rows(
                    "SELECT count(*), count(*) FILTER (WHERE tool = 'sleep') FROM runs \
                     WHERE state = 'running'",
                );
                let n = |i: usize| row[0][i].as_deref().unwrap().parse::<i64>().unwrap();
                session_most.fetch_max(n(0), Ordering::Relaxed);
                tool_most.fetch_max(n(1), Ordering::Relaxed);
                samples.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let mut workers: Vec<Killed> = ["host-a", "host-b", "host-c", "host-d"]
        .into_iter()
        .map(|h| Killed(spawn_worker_on(&s, true, Some(h))))
        .collect();
    for w in &mut workers {
        assert!(wait_exit(&mut w.0, Duration::from_secs(300)).success());
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();

    assert_each_run_completed_once(&s, RUNS);
    assert!(samples.load(Ordering::Relaxed) > 1);
    let (in_session, of_tool) = (
        session_most.load(Ordering::Relaxed),
        tool_most.load(Ordering::Relaxed),
    );
    assert!(
        in_session <= 4,
        "{in_session} runs of one session running at once across processes (limit 4)"
    );
    assert!(
        of_tool <= 3,
        "{of_tool} sleep runs running at once across processes (limit 3)"
    );
    eprintln!(
        "one session at its limit: most running {in_session} (limit 4), sleep {of_tool} (limit 3), \
         over {} samples",
        samples.load(Ordering::Relaxed)
    );
}

#[test]
fn a_host_that_stops_heartbeating_loses_its_runs_at_lease_expiry_and_its_late_finish_is_fenced() {
    let s = setup(
        "[worker]\nconcurrency = 2\nper_session = 2\npoll_interval = \"20ms\"\n\
         heartbeat_interval = \"100ms\"\nlease = \"2s\"\nshutdown_grace = \"10s\"\n\
         [runs]\nbackoff_base = \"10ms\"\nbackoff_max = \"50ms\"\n",
    );
    enqueue_sleeps(
        &s.db,
        (0..2).map(|_| ("s".to_string(), 1500, None)).collect(),
    );
    let a = Killed(spawn_worker_on(&s, false, Some("host-a")));
    wait_until("host-a runs both runs", || {
        s.db.count("SELECT count(*) FROM runs WHERE state = 'running'") == 2
    });
    // Frozen: no heartbeat, no finish, but its pid stays alive.
    signal(&a.0, Signal::SIGSTOP);
    let expires: Vec<_> =
        s.db.column("SELECT lease_expires_at FROM runs ORDER BY id")
            .iter()
            .map(|t| parse(t))
            .collect();
    let b = Killed(spawn_worker_on(&s, false, Some("host-b")));
    wait_until("host-b completes both runs", || {
        s.db.count("SELECT count(*) FROM runs WHERE state = 'completed' AND attempt = 2") == 2
    });
    // Each rescue came after the run's lease had expired, not at once.
    let rescued: Vec<_> =
        s.db.column("SELECT errors FROM runs ORDER BY id")
            .iter()
            .map(|e| {
                let v: serde_json::Value = serde_json::from_str(e).unwrap();
                let lost = v
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|e| e["error"].as_str().unwrap().starts_with("worker lost"))
                    .cloned()
                    .unwrap_or_else(|| panic!("no worker lost entry: {v}"));
                parse(lost["at"].as_str().unwrap())
            })
            .collect();
    for (at, expiry) in rescued.iter().zip(&expires) {
        assert!(
            at >= expiry,
            "rescued at {at}, before its lease expired at {expiry}"
        );
    }
    // Thawed, host-a finishes its stale attempts: fenced out, nothing recorded twice.
    signal(&a.0, Signal::SIGCONT);
    std::thread::sleep(Duration::from_millis(2500));
    signal(&a.0, Signal::SIGTERM);
    signal(&b.0, Signal::SIGTERM);
    let (mut a, mut b) = (a, b);
    wait_exit(&mut a.0, Duration::from_secs(30));
    assert!(wait_exit(&mut b.0, Duration::from_secs(30)).success());
    assert_recorded_exactly_once(&s.db);
    assert_eq!(
        s.db.count("SELECT count(*) FROM runs WHERE state = 'completed' AND attempt = 2"),
        2
    );
    assert_eq!(
        s.db.count("SELECT count(*) FROM inbox WHERE kind = 'completed'"),
        2
    );
}

/// Issue 40, item 1: a host frozen by SIGSTOP anywhere (inside a transaction that holds the
/// inbox or claim lock, or a row lock) holds nothing the others wait on for longer than the
/// server's idle-in-transaction bound. Over several stops, the other hosts keep completing runs
/// and heartbeating, none of their runs is taken from them, and the frozen host's runs are
/// rescued once their lease expires. Prints the longest stall it saw.
#[test]
fn a_host_frozen_mid_transaction_never_stops_the_other_hosts() {
    const RUNS: usize = 6000;
    const STOPS: usize = 3;
    // Well over the server's 3 s idle bound plus a heartbeat interval, as the README asks: a
    // live host's heartbeat may wait out the frozen host's locks once and still be in time.
    let lease = Duration::from_secs(8);
    // Twice that bound: the others go on after one wait, never for a whole stop.
    let stall_bound = Duration::from_secs(6);
    let s = setup(
        "[worker]\nconcurrency = 6\nper_session = 2\npoll_interval = \"20ms\"\n\
         heartbeat_interval = \"500ms\"\nlease = \"8s\"\nshutdown_grace = \"10s\"\n\
         [runs]\nbackoff_base = \"10ms\"\nbackoff_max = \"50ms\"\n",
    );
    enqueue_sleeps(
        &s.db,
        (0..RUNS)
            .map(|i| (format!("s{}", i % 40), 100 + (i % 3) as u64 * 100, None))
            .collect(),
    );
    let completed = || {
        s.db.count("SELECT count(*) FROM runs WHERE state = 'completed'")
    };
    let mut workers: Vec<Killed> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|h| Killed(spawn_worker_on(&s, false, Some(h))))
        .collect();
    wait_until("the hosts complete runs", || completed() > 100);
    let mut longest = Duration::ZERO;
    for round in 0..STOPS {
        // Frozen for longer than its lease: its runs are rescued meanwhile.
        signal(&workers[0].0, Signal::SIGSTOP);
        let stopped = Instant::now();
        let (mut last, mut since) = (completed(), Instant::now());
        while stopped.elapsed() < lease + lease / 2 {
            std::thread::sleep(Duration::from_millis(50));
            let now = completed();
            if now > last {
                longest = longest.max(since.elapsed());
                (last, since) = (now, Instant::now());
            }
        }
        longest = longest.max(since.elapsed());
        assert!(
            longest < stall_bound,
            "round {round}: the other hosts completed nothing for {longest:?} while host-a was stopped"
        );
        signal(&workers[0].0, Signal::SIGCONT);
        std::thread::sleep(Duration::from_millis(700));
    }
    eprintln!("a frozen host: longest stall of the others over {STOPS} stops: {longest:?}");
    // The others were never taken for dead: every run taken back was host-a's.
    let a_id =
        s.db.column("SELECT id FROM workers WHERE host = 'host-a'")
            .remove(0);
    let lost: Vec<String> =
        s.db.column("SELECT errors FROM runs WHERE errors LIKE '%worker lost%'");
    assert!(
        !lost.is_empty(),
        "host-a's runs were rescued while it was frozen"
    );
    for errors in &lost {
        let v: serde_json::Value = serde_json::from_str(errors).unwrap();
        for e in v.as_array().unwrap() {
            let internal = e["internal_error"].as_str().unwrap_or_default();
            if e["error"]
                .as_str()
                .unwrap_or_default()
                .starts_with("worker lost")
            {
                assert!(
                    internal.contains(&a_id),
                    "a live host lost a run: {internal} (host-a is {a_id})"
                );
            }
        }
    }
    // What is still queued is not this test's subject: cancelled, and the rest ends. A
    // running run that fails meanwhile is queued again for its retry, after the cancel:
    // cancelled in its turn, until nothing is queued or running.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolq"))
            .args(["--db", &s.db.url, "cancel", "--state", "queued", "--all"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until("the running runs end", || {
            s.db.count("SELECT count(*) FROM runs WHERE state = 'running'") == 0
        });
        if s.db
            .count("SELECT count(*) FROM runs WHERE state IN ('queued', 'running')")
            == 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "runs still queued after 120 s");
    }
    for w in &mut workers {
        signal(&w.0, Signal::SIGTERM);
    }
    for w in &mut workers {
        wait_exit(&mut w.0, Duration::from_secs(60));
    }
    assert_recorded_exactly_once(&s.db);
}
