//! Flow control (issue 21): per-tool `max_running` and `rate` hold over several real worker
//! processes (checked from a second connection), pauses hold across a worker restart and
//! resume wakes the worker, a paused schedule records its ticks as `paused`, and the rate's
//! window on the manual clock holds a run back with a reason until it opens.

use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use toolq::flow::{PauseScope, Rate, ToolLimit};
use toolq::{EnqueueRequest, RunState, ScheduleRequest};

use crate::crash::{Setup, enqueue_with, one, setup, spawn_worker, wait_exit};
use crate::support::{Killed, TestEnv, wait_until};

/// Runs `toolq` with the setup's config: (exit code, stdout, stderr).
fn cli(s: &Setup, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_toolq"))
        .arg("--db")
        .arg(&s.db)
        .arg("--config")
        .arg(&s.config)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// How many worker processes' own logs (see `crash::spawn_worker`) show a started attempt.
fn workers_that_started_runs(s: &Setup) -> usize {
    std::fs::read_dir(s.dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("worker-"))
        })
        .filter(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .any(|l| l.ends_with("toolq::worker: started"))
        })
        .count()
}

fn times(c: &crate::support::TestDb, sql: &str) -> Vec<DateTime<Utc>> {
    c.column(sql)
        .iter()
        .map(|s| crate::crash::parse(s))
        .collect()
}

/// Three drain workers of 8 slots each, 24 runs of a tool limited to 2 running: a second
/// connection never sees more than 2 running, and the runs' recorded spans (a claim sees a
/// run as running until its end commits) never overlap more than 2 deep.
#[test]
fn a_per_tool_limit_holds_across_worker_processes() {
    let s = setup(
        "[worker]\nconcurrency = 8\nper_session = 8\npoll_interval = \"50ms\"\n\
         [limits.sleep]\nmax_running = 2\n",
    );
    let reqs = (0..24)
        .map(|i| EnqueueRequest::new("sleep", json!({"ms": 60})).session(format!("s{}", i % 4)))
        .chain((0..8).map(|i| {
            EnqueueRequest::new("echo", json!({"message": "free"})).session(format!("s{i}"))
        }))
        .collect();
    enqueue_with(&s.db, Some(&s.config), reqs);
    let mut workers: Vec<Killed> = (0..3).map(|_| Killed(spawn_worker(&s, true))).collect();
    let c = s.db.clone();
    let (mut most, mut samples) = (0, 0);
    wait_until("24 sleep runs complete", || {
        let n = one(
            &c,
            "SELECT count(*) FROM runs WHERE tool = 'sleep' AND state = 'running'",
        );
        most = most.max(n);
        samples += 1;
        one(
            &c,
            "SELECT count(*) FROM runs WHERE tool = 'sleep' AND state = 'completed'",
        ) == 24
    });
    for w in &mut workers {
        assert!(wait_exit(&mut w.0, Duration::from_secs(30)).success());
    }
    assert!(most <= 2, "{most} sleep runs running at once (limit 2)");
    assert!(most >= 1 && samples > 1, "sampled {samples} times");
    assert_eq!(
        one(&c, "SELECT count(*) FROM runs WHERE state = 'completed'"),
        32
    );
    // Every span [started_at, finished_at]: at most 2 open at any instant.
    let mut edges: Vec<(DateTime<Utc>, i32)> = Vec::new();
    for (a, b) in times(
        &c,
        "SELECT started_at FROM runs WHERE tool = 'sleep' ORDER BY id",
    )
    .into_iter()
    .zip(times(
        &c,
        "SELECT finished_at FROM runs WHERE tool = 'sleep' ORDER BY id",
    )) {
        edges.push((a, 1));
        edges.push((b, -1));
    }
    // An end and a start at the same millisecond: the end first (the claim saw it ended).
    edges.sort();
    let (mut open, mut deepest) = (0, 0);
    for (_, d) in edges {
        open += d;
        deepest = deepest.max(open);
    }
    assert!(deepest <= 2, "recorded spans overlap {deepest} deep");
    eprintln!(
        "max_running 2: {samples} samples, most running seen {most}, recorded spans {deepest} deep"
    );
    // Which workers took part is up to the race (a finishing worker claims its replacement in
    // the same transaction); the limit holds whichever did.
    eprintln!(
        "workers that started runs: {}",
        workers_that_started_runs(&s)
    );
}

/// Three drain workers, 12 runs of a tool limited to 4 starts per 2 s: in any 2 s, at most 4
/// of them started (from the runs' start times, read from a second connection).
#[test]
fn a_rate_holds_across_worker_processes() {
    let s = setup(
        "[worker]\nconcurrency = 8\nper_session = 8\npoll_interval = \"50ms\"\n\
         [limits.echo]\nrate = \"4/2s\"\n",
    );
    let reqs = (0..12)
        .map(|i| {
            EnqueueRequest::new("echo", json!({"message": format!("m{i}")}))
                .session(format!("s{}", i % 3))
        })
        .collect();
    enqueue_with(&s.db, Some(&s.config), reqs);
    let mut workers: Vec<Killed> = (0..3).map(|_| Killed(spawn_worker(&s, true))).collect();
    let c = s.db.clone();
    wait_until("12 echo runs complete", || {
        one(&c, "SELECT count(*) FROM runs WHERE state = 'completed'") == 12
    });
    for w in &mut workers {
        assert!(wait_exit(&mut w.0, Duration::from_secs(30)).success());
    }
    let starts = times(&c, "SELECT started_at FROM runs ORDER BY started_at");
    assert_eq!(starts.len(), 12);
    let tightest = starts.windows(5).map(|w| w[4] - w[0]).min();
    eprintln!("rate 4/2s: the tightest 5 consecutive starts span {tightest:?}");
    for w in starts.windows(5) {
        assert!(
            w[4] - w[0] >= chrono::Duration::seconds(2),
            "5 starts within 2 s: {w:?}"
        );
    }
    // Which workers took part is up to the race (a finishing worker claims its replacement in
    // the same transaction); the limit holds whichever did.
    eprintln!(
        "workers that started runs: {}",
        workers_that_started_runs(&s)
    );
    // The per-slice counts hold at least the last window's starts.
    assert!(
        one(
            &c,
            "SELECT coalesce(sum(starts), 0) FROM tool_starts WHERE tool = 'echo'"
        ) >= 4
    );
}

/// A pause set before a worker starts holds its runs through a restart of the worker (other
/// tools run meanwhile); a running run finishes under a pause; resume lets the worker run the
/// paused runs, woken by the commit.
#[test]
fn pause_and_resume_hold_across_a_worker_restart() {
    let s = setup("[worker]\npoll_interval = \"5s\"\n");
    toolq_init(&s);
    let (code, out, err) = cli(
        &s,
        &[
            "pause", "--tool", "echo", "--by", "alice", "--reason", "API down",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("paused tool echo since"), "{out}");
    assert!(err.is_empty(), "a known tool pauses without a note: {err}");
    // A name this configuration lacks may be a host's own tool: paused, with a note.
    let (code, out, err) = cli(&s, &["pause", "--tool", "ech"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("paused tool ech"), "{out}");
    assert!(err.contains("no tool \"ech\" is registered"), "{err}");
    assert_eq!(cli(&s, &["resume", "--tool", "ech"]).0, 0);
    let (_, out, _) = cli(&s, &["pause", "--tool", "echo", "--by", "bob"]);
    assert!(
        out.contains("already paused") && out.contains("by alice"),
        "{out}"
    );
    let echo =
        |i: i32| EnqueueRequest::new("echo", json!({"message": format!("m{i}")})).session("ops");
    enqueue_with(&s.db, Some(&s.config), (0..3).map(echo).collect());
    let c = s.db.clone();
    let completed = |tool: &str| {
        one(
            &c,
            &format!("SELECT count(*) FROM runs WHERE tool = '{tool}' AND state = 'completed'"),
        )
    };
    for round in 1..=2 {
        let mut w = Killed(spawn_worker(&s, false));
        let sleep = EnqueueRequest::new("sleep", json!({"ms": 300})).session("ops");
        enqueue_with(&s.db, Some(&s.config), vec![sleep]);
        if round == 2 {
            // A running run finishes when its tool is paused.
            wait_until("the sleep run runs", || {
                one(
                    &c,
                    "SELECT count(*) FROM runs WHERE tool = 'sleep' AND state = 'running'",
                ) == 1
            });
            assert_eq!(cli(&s, &["pause", "--tool", "sleep"]).0, 0);
        }
        wait_until("the sleep run completes", || completed("sleep") == round);
        assert_eq!(
            one(
                &c,
                "SELECT count(*) FROM runs WHERE tool = 'echo' AND state = 'queued' AND attempt = 0"
            ),
            3,
            "round {round}: a paused run was claimed"
        );
        let (_, out, _) = cli(&s, &["stats"]);
        assert!(
            out.contains("tool echo since") && out.contains("by alice: API down"),
            "{out}"
        );
        let id = c
            .text("SELECT id FROM runs WHERE tool = 'echo' LIMIT 1")
            .unwrap();
        let (_, out, _) = cli(&s, &["show", &id]);
        assert!(out.contains("paused (tool echo)"), "{out}");
        // A clean stop (SIGTERM), then the next round starts a fresh worker process.
        sigterm(&w.0);
        assert!(wait_exit(&mut w.0, Duration::from_secs(30)).success());
    }
    let (_, out, _) = cli(&s, &["--json", "status"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["paused"][0]["scope"], "tool", "{v}");
    assert_eq!(v["paused"][0]["value"], "echo", "{v}");
    assert_eq!(v["paused"][0]["by"], "alice", "{v}");
    assert_eq!(one(&c, "SELECT count(*) FROM paused"), 2);

    // The poll is 5 s: the resume's commit is what wakes the worker.
    let _w = Killed(spawn_worker(&s, false));
    wait_until("the worker registers", || {
        one(&c, "SELECT count(*) FROM workers WHERE stopped_at IS NULL") == 1
    });
    let (code, out, _) = cli(&s, &["resume", "--tool", "echo"]);
    assert_eq!(code, 0);
    assert!(out.contains("resumed tool echo"), "{out}");
    wait_until("the echo runs complete", || completed("echo") == 3);
    let (_, out, _) = cli(&s, &["resume", "--tool", "echo"]);
    assert!(out.contains("was not paused"), "{out}");
    let (code, _, err) = cli(&s, &["pause"]);
    assert_eq!(code, 2, "{err}");
}

fn toolq_init(s: &Setup) {
    assert_eq!(cli(s, &["init"]).0, 0);
}

/// SIGTERM: the worker's clean shutdown.
fn sigterm(child: &std::process::Child) {
    let ok = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// Claims at most `max` runs as `worker` with `limits`, at the env's clock.
async fn claim(
    env: &TestEnv,
    worker: &str,
    max: usize,
    limits: &toolq::flow::ToolLimits,
) -> Vec<toolq::Run> {
    let now = env.client.now();
    env.client
        .engine()
        .attempt_claim(toolq::store::Claim {
            worker: worker.into(),
            now,
            lease_until: now + chrono::Duration::seconds(30),
            max,
            per_session: 100,
            after_session: None,
            tools: env.client.registry().names().into(),
            limits: std::sync::Arc::new(limits.clone()),
            background_room: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_rate_holds_a_run_with_a_reason_until_its_window_opens() {
    let env = TestEnv::with_config(|c| {
        c.limits.insert(
            "echo".into(),
            ToolLimit {
                max_running: None,
                rate: Some(Rate::parse("2/1m").unwrap()),
            },
        );
    });
    let limits = env.client.config().limits.clone();
    for i in 0..3 {
        env.client
            .enqueue(EnqueueRequest::new(
                "echo",
                json!({"message": format!("m{i}")}),
            ))
            .await
            .unwrap();
    }
    let first = claim(&env, "wk_a", 10, &limits).await;
    assert_eq!(first.len(), 2);
    // Another worker with the same limits sees the same window.
    assert!(claim(&env, "wk_b", 10, &limits).await.is_empty());
    let held = env
        .client
        .list(toolq::run::ListFilter {
            state: Some(RunState::Queued),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .remove(0);
    let why = env.client.hold_reason(&held).await.unwrap().unwrap();
    assert!(
        why.contains("rate 2/1m of echo reached; the window opens at 2026-11-01T12:01:01.000Z"),
        "{why}"
    );
    // The starts' slice (a second wide) counts until all of it has left the window.
    env.clock.advance(chrono::Duration::seconds(60));
    assert!(claim(&env, "wk_b", 10, &limits).await.is_empty());
    env.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(claim(&env, "wk_b", 10, &limits).await.len(), 1);
    assert_eq!(env.client.hold_reason(&held).await.unwrap(), None);
}

#[tokio::test]
async fn max_running_counts_the_runs_of_every_worker() {
    let env = TestEnv::new();
    let mut limits = toolq::flow::ToolLimits::new();
    limits.insert(
        "echo".into(),
        ToolLimit {
            max_running: Some(3),
            rate: None,
        },
    );
    for i in 0..6 {
        let r = EnqueueRequest::new("echo", json!({"message": format!("m{i}")}))
            .session(format!("s{i}"));
        env.client.enqueue(r).await.unwrap();
        let r = EnqueueRequest::new("counter", json!({})).session(format!("s{i}"));
        env.client.enqueue(r).await.unwrap();
    }
    let a = claim(&env, "wk_a", 2, &limits).await;
    let b = claim(&env, "wk_b", 10, &limits).await;
    let echo = |runs: &[toolq::Run]| runs.iter().filter(|r| r.tool == "echo").count();
    assert_eq!(echo(&a) + echo(&b), 3, "a: {a:?}, b: {b:?}");
    // Unlimited tools are not held by another tool's limit.
    assert_eq!(a.len() + b.len(), 9);
    assert!(claim(&env, "wk_c", 10, &limits).await.is_empty());
}

#[tokio::test]
async fn a_paused_schedule_records_its_ticks_as_paused_and_fires_after_resume() {
    let env = TestEnv::new();
    let s = env
        .client
        .create_schedule(ScheduleRequest::cron(
            "echo",
            json!({"message": "tick"}),
            "* * * * *",
        ))
        .await
        .unwrap();
    env.client
        .pause(
            PauseScope::Session(s.session_id.clone()),
            Some("ops".into()),
            None,
        )
        .await
        .unwrap();
    for _ in 0..3 {
        env.clock.advance(chrono::Duration::minutes(1));
        let r = env.client.fire_due_schedules().await.unwrap();
        assert_eq!((r.runs.len(), r.paused), (0, 1), "{r:?}");
    }
    assert_eq!(
        env.count("SELECT count(*) FROM schedule_occurrences WHERE outcome = 'paused'"),
        3
    );
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
    env.client
        .resume(PauseScope::Session(s.session_id.clone()))
        .await
        .unwrap()
        .unwrap();
    env.clock.advance(chrono::Duration::minutes(1));
    let r = env.client.fire_due_schedules().await.unwrap();
    assert_eq!((r.runs.len(), r.paused), (1, 0), "{r:?}");
    // The same for a paused tool.
    env.client
        .pause(PauseScope::Tool("echo".into()), None, None)
        .await
        .unwrap();
    env.clock.advance(chrono::Duration::minutes(1));
    assert_eq!(env.client.fire_due_schedules().await.unwrap().paused, 1);
}
