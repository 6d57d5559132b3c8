//! Bulk cancel and retry: filters, keyset batches each its own transaction, the end-writer
//! for every cancel, the CLI's forms, and a 10,000-run retry while two worker processes drain.

use std::process::{Child, Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::inbox::InboxFilter;
use toolq::{BulkOptions, EnqueueRequest, Error, RunFilter, RunId, RunState};

use crate::crash::one;
use crate::support::wait_until;
use crate::support::{TestEnv, toolq, wait_for};

fn opts(batch_size: usize) -> BulkOptions {
    BulkOptions {
        batch_size,
        ..BulkOptions::default()
    }
}

async fn enqueue(env: &TestEnv, tool: &str, session: &str, delay_h: i64) -> RunId {
    let mut req = EnqueueRequest::new(tool, json!({"message": "bulk"})).session(session);
    req.max_attempts = Some(1);
    if delay_h > 0 {
        req.run_at = Some(env.client.now() + chrono::Duration::hours(delay_h));
    }
    env.client.enqueue(req).await.unwrap().run_id
}

async fn state(env: &TestEnv, id: &RunId) -> RunState {
    env.client.get(id).await.unwrap().state
}

#[tokio::test]
async fn bulk_cancel_ends_waiting_runs_and_asks_running_ones_to_stop() {
    let env = TestEnv::new();
    let mut waiting = Vec::new();
    for _ in 0..7 {
        waiting.push(enqueue(&env, "echo", "a", 1).await);
    }
    let other = enqueue(&env, "echo", "b", 1).await;
    let mut req = EnqueueRequest::new("sleep", json!({"ms": 600_000})).session("a");
    req.max_attempts = Some(1);
    let running = env.client.enqueue(req).await.unwrap().run_id;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(
        env.client
            .worker(toolq::WorkerOptions::default())
            .run(stop.clone()),
    );
    wait_for("the sleep runs", async || {
        let s = state(&env, &running).await;
        ((s == RunState::Running).then_some(()), s.to_string())
    })
    .await;

    let filter = RunFilter {
        session: Some("a".into()),
        ..RunFilter::default()
    };
    let dry = env
        .client
        .cancel_where(
            &filter,
            BulkOptions {
                dry_run: true,
                max_ids: 3,
                ..BulkOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((dry.matched, dry.done, dry.batches), (8, 0, 0));
    assert_eq!((dry.ids.len(), dry.ids_truncated), (3, true));
    assert_eq!(dry.ids[0], waiting[0], "ids in id order");
    assert_eq!(state(&env, &waiting[0]).await, RunState::Queued);

    let r = env.client.cancel_where(&filter, opts(3)).await.unwrap();
    assert_eq!(
        (r.matched, r.done, r.cancel_requested, r.skipped, r.batches),
        (8, 7, 1, 0, 3)
    );
    for id in &waiting {
        assert_eq!(state(&env, id).await, RunState::Cancelled);
    }
    assert_eq!(
        state(&env, &other).await,
        RunState::Queued,
        "session b untouched"
    );
    wait_for("the running run to end cancelled", async || {
        let s = state(&env, &running).await;
        ((s == RunState::Cancelled).then_some(()), s.to_string())
    })
    .await;
    stop.cancel();
    worker.await.unwrap().unwrap();

    // Every run ended through the end-writer: one cancelled message each, with its result.
    let msgs = env
        .client
        .inbox(
            "a",
            InboxFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(msgs.len(), 8);
    assert!(msgs.iter().all(|m| m.kind == "cancelled"), "{msgs:?}");
    let run = env.client.get(&waiting[3]).await.unwrap();
    let blob = env.client.result(&run).await.unwrap().unwrap();
    let v: Value = serde_json::from_slice(&blob.content).unwrap();
    assert_eq!(v["status"], "cancelled");

    // Nothing left to cancel in session a; a final state is not something cancel acts on.
    let again = env.client.cancel_where(&filter, opts(3)).await.unwrap();
    assert_eq!((again.matched, again.done, again.batches), (0, 0, 0));
    let bad = RunFilter {
        states: vec![RunState::Failed],
        ..RunFilter::default()
    };
    let e = env.client.cancel_where(&bad, opts(3)).await.unwrap_err();
    assert!(matches!(e, Error::Input(_)), "{e}");
}

#[tokio::test]
async fn bulk_retry_requeues_each_matching_run_once_in_batches() {
    let env = TestEnv::new();
    let mut old = Vec::new();
    for _ in 0..5 {
        old.push(enqueue(&env, "fail", "s1", 0).await);
    }
    env.clock.advance(chrono::Duration::hours(2));
    let mut new = Vec::new();
    for _ in 0..3 {
        new.push(enqueue(&env, "fail", "s1", 0).await);
    }
    let done = enqueue(&env, "echo", "s1", 0).await;
    env.drain().await;
    for id in old.iter().chain(&new) {
        assert_eq!(state(&env, id).await, RunState::Failed);
    }

    // --older-than 1h: the five old ones, two per transaction.
    let hour_ago = env.client.now() - chrono::Duration::hours(1);
    let older = RunFilter {
        states: vec![RunState::Failed],
        created_before: Some(hour_ago),
        ..RunFilter::default()
    };
    let r = env.client.retry_where(&older, opts(2)).await.unwrap();
    assert_eq!((r.matched, r.done, r.skipped, r.batches), (5, 5, 0, 3));
    assert_eq!(r.ids, old);
    for id in &old {
        let run = env.client.get(id).await.unwrap();
        assert_eq!(
            (run.state, run.attempt, run.max_attempts),
            (RunState::Queued, 1, 2)
        );
    }
    for id in &new {
        assert_eq!(state(&env, id).await, RunState::Failed);
    }
    // --newer-than 1h with --tool: the three new ones.
    let newer = RunFilter {
        tool: Some("fail".into()),
        created_after: Some(hour_ago),
        ..RunFilter::default()
    };
    let r = env.client.retry_where(&newer, opts(500)).await.unwrap();
    assert_eq!((r.done, r.batches), (3, 1));
    assert_eq!(
        state(&env, &done).await,
        RunState::Completed,
        "completed untouched"
    );
    let bad = RunFilter {
        states: vec![RunState::Completed],
        ..RunFilter::default()
    };
    let e = env.client.retry_where(&bad, opts(2)).await.unwrap_err();
    assert!(matches!(e, Error::Input(_)), "{e}");
    let e = env.client.retry_where(&newer, opts(0)).await.unwrap_err();
    assert!(matches!(e, Error::Input(_)), "{e}");

    // Each retried run's second attempt ends once more: one message per attempt.
    env.drain().await;
    let db = env.db.clone();
    assert_eq!(
        one(
            &db,
            "SELECT count(*) FROM runs WHERE tool = 'fail' AND attempt = 2 AND state = 'failed'"
        ),
        8
    );
    assert_eq!(
        one(
            &db,
            "SELECT count(*) FROM inbox i JOIN runs r ON r.id = i.run_id WHERE r.tool = 'fail'"
        ),
        16
    );
}

fn out(o: &std::process::Output) -> (i32, Value, String) {
    let stdout = String::from_utf8_lossy(&o.stdout);
    (
        o.status.code().unwrap_or(-1),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn bulk_cli_refuses_an_empty_or_mixed_call_and_keeps_the_single_id_form() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let ids: Vec<String> = (0..3)
        .map(|i| {
            let o = toolq(
                &db,
                &[
                    "enqueue",
                    "echo",
                    "--in",
                    "1h",
                    "--args",
                    &format!("{{\"message\":\"{i}\"}}"),
                ],
            );
            assert!(o.status.success(), "{o:?}");
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        })
        .collect();

    for args in [
        vec!["cancel"],
        vec!["retry"],
        vec!["cancel", &ids[0], "--tool", "echo"],
        vec!["retry", &ids[0], "--all"],
        vec!["retry", "--state", "queued"],
        vec!["cancel", "--state", "nope"],
        vec!["cancel", "--older-than", "soon"],
    ] {
        let (code, _, err) = out(&toolq(&db, &args));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.starts_with("toolq: "), "{args:?}: {err}");
    }
    let (_, _, err) = out(&toolq(&db, &["cancel"]));
    assert!(err.contains("--all"), "{err}");

    // The single-id form answers as before.
    let (code, v, err) = out(&toolq(&db, &["--json", "cancel", &ids[0]]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (&v["run_id"], &v["state"], &v["cancel_requested"]),
        (&json!(ids[0]), &json!("cancelled"), &json!(false))
    );
    let (code, v, _) = out(&toolq(&db, &["--json", "retry", &ids[0]]));
    assert_eq!(code, 0);
    assert_eq!(
        (&v["run_id"], &v["state"]),
        (&json!(ids[0]), &json!("queued"))
    );

    let (code, v, _) = out(&toolq(
        &db,
        &["--json", "cancel", "--tool", "echo", "--dry-run"],
    ));
    assert_eq!(code, 0);
    assert_eq!(
        (v["dry_run"].clone(), v["matched"].clone()),
        (json!(true), json!(3))
    );
    assert_eq!(v["ids"], json!(ids));
    let (code, v, _) = out(&toolq(
        &db,
        &["--json", "cancel", "--all", "--batch-size", "2"],
    ));
    assert_eq!(code, 0);
    assert_eq!(
        (
            v["cancelled"].clone(),
            v["cancel_requested"].clone(),
            v["batches"].clone()
        ),
        (json!(3), json!(0), json!(2))
    );
    let o = toolq(
        &db,
        &["retry", "--state", "cancelled", "--newer-than", "1h"],
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "retried 3 runs, skipped 0 (changed state meanwhile) in 1 batches"
    );
}

/// A worker process, killed when the test ends (also when an assertion fails first).
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(db: &crate::support::TestDb) -> Worker {
    Worker(
        Command::new(env!("CARGO_BIN_EXE_toolq"))
            .arg("--db")
            .arg(db)
            .args(["worker", "--log", "warn"])
            .env_remove("TOOLQ_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("worker starts"),
    )
}

/// 10,000 failed runs are retried by `toolq retry --state failed` while two worker processes
/// drain them as the batches commit: every run is re-queued once, its second attempt ends
/// once, and every attempt has exactly one final message.
#[test]
fn a_bulk_retry_of_10000_failed_runs_while_two_workers_drain() {
    const N: i64 = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let file = dir.path().join("runs.jsonl");
    // Spread over sessions so the per-session limit does not serialise the drain.
    let lines: Vec<String> = (0..N)
        .map(|i| {
            json!({"tool": "divide", "args": {"a": i, "b": 0}, "max_attempts": 1,
                   "session": format!("s{}", i % 20)})
            .to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let o = toolq(&db, &["enqueue", "--file", file.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");

    let workers = [worker(&db), worker(&db)];
    let c = db.clone();
    let failed = || one(&c, "SELECT count(*) FROM runs WHERE state = 'failed'");
    wait_until("the first attempts to fail", || failed() == N);

    let started = Instant::now();
    let o = toolq(&db, &["--json", "retry", "--state", "failed"]);
    let took = started.elapsed();
    let (code, v, err) = out(&o);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (v["retried"].clone(), v["skipped"].clone()),
        (json!(N), json!(0))
    );
    assert_eq!(v["batches"], json!(20), "10,000 runs in batches of 500");
    assert_eq!(v["ids"].as_array().unwrap().len(), 100, "ids are bounded");
    eprintln!(
        "bulk retry of {N} failed runs: {took:?}, {} batches",
        v["batches"]
    );

    wait_until("the second attempts to fail", || {
        one(
            &c,
            "SELECT count(*) FROM runs WHERE state = 'failed' AND attempt = 2",
        ) == N
    });
    drop(workers);
    assert_eq!(one(&c, "SELECT count(*) FROM runs WHERE attempt <> 2"), 0);
    assert_eq!(
        one(&c, "SELECT count(*) FROM inbox WHERE kind = 'failed'"),
        2 * N,
        "one final message per attempt"
    );
    assert_eq!(
        one(
            &c,
            "SELECT count(*) FROM (SELECT run_id FROM inbox GROUP BY run_id \
             HAVING count(*) <> 2 OR count(DISTINCT attempt) <> 2 OR min(attempt) <> 1) r"
        ),
        0,
        "attempts 1 and 2 each ended once"
    );
}

/// The batch writes re-check every run: a run that changed state after the page was read is
/// left as it is and reported as not applied (the library counts it as skipped).
#[tokio::test]
async fn a_batch_leaves_runs_that_changed_state_since_the_page_was_read() {
    use toolq::store::{RunCancelMany, RunRetryMany, RunSelect};
    let env = TestEnv::new();
    let (a, b) = (
        enqueue(&env, "echo", "s1", 1).await,
        enqueue(&env, "echo", "s1", 1).await,
    );
    let store = env.client.engine();
    let page = store
        .run_select(RunSelect {
            filter: RunFilter::default(),
            after: String::new(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(page.iter().map(|r| &r.id).collect::<Vec<_>>(), [&a, &b]);
    // `a` is cancelled by someone else after the read.
    env.client.cancel(&a).await.unwrap();
    let ends = page
        .iter()
        .map(|r| {
            toolq::worker::finish::decide_waiting(r, toolq::worker::finish::WaitingEnd::Cancelled)
        })
        .collect();
    let now = env.client.now();
    let out = store
        .run_cancel_many(RunCancelMany {
            ends,
            requests: vec![a.clone()],
            now,
        })
        .await
        .unwrap();
    assert_eq!((out.ended, out.requested), (vec![false, true], vec![false]));
    // One message each: the stale end of `a` wrote nothing.
    assert_eq!(
        env.count("SELECT count(*) FROM inbox WHERE kind = 'cancelled'"),
        2
    );
    // A retry that read `b` as failed finds it cancelled: not applied.
    let out = store
        .run_retry_many(RunRetryMany {
            runs: vec![
                (a.clone(), RunState::Cancelled),
                (b.clone(), RunState::Failed),
            ],
            now,
            approvals: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(out, [true, false]);
    assert_eq!(state(&env, &a).await, RunState::Queued);
    assert_eq!(state(&env, &b).await, RunState::Cancelled);
}
