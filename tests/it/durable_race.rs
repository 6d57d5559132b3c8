//! Events racing suspensions: "go" sent to runs just before, during and after the commit that
//! suspends them, while two workers run them. None is lost (a lost wake-up would leave its
//! run waiting a day and fail the test by its deadline) and none is used twice. And waiting
//! runs hold no slot: a worker with concurrency 1 completes other runs while 50 runs wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::{
    Client, EnqueueRequest, RegistryBuilder, RunId, RunState, Tool, ToolContext, ToolDef,
    ToolOutcome, WaitKind,
};

use crate::support::TestDb;

/// Per run: how often its wait returned an event.
type Taken = Arc<Mutex<HashMap<String, usize>>>;

/// Waits for "go" at once (a day at most) and returns its payload.
struct Waiter(Taken);

#[async_trait]
impl Tool for Waiter {
    fn definition(&self) -> ToolDef {
        ToolDef::new("waiter", "waits for go", json!({"type": "object"}))
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        match ctx.wait_for_event("go", Duration::from_secs(86_400)).await {
            Ok(Some(payload)) => {
                *self
                    .0
                    .lock()
                    .unwrap()
                    .entry(ctx.run_id.to_string())
                    .or_insert(0) += 1;
                ToolOutcome::ok(payload)
            }
            Ok(None) => ToolOutcome::ok(json!("timed out")),
            Err(e) => e.into(),
        }
    }
}

fn client(db: &TestDb, concurrency: usize, taken: &Taken) -> Client {
    let mut config = db.config();
    config.worker.concurrency = concurrency;
    config.worker.per_session = 1000;
    config.worker.poll_interval = Duration::from_millis(20);
    config.worker.heartbeat_interval = Duration::from_millis(100);
    config.worker.flush_interval = Duration::from_millis(50);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(Waiter(taken.clone()))
        .build()
        .unwrap();
    Client::open(config, registry).unwrap()
}

async fn enqueue(client: &Client, tool: &str, args: Value, n: usize) -> Vec<RunId> {
    let reqs = (0..n)
        .map(|i| EnqueueRequest::new(tool, args.clone()).session(format!("s{}", i % 5)))
        .collect();
    client
        .enqueue_batch(reqs)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect()
}

/// Waits until the run is suspended in its wait (failing after a minute).
async fn until_suspended(client: &Client, id: &RunId) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while client.get(id).await.unwrap().waiting.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {id} never suspended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `done` holds for the runs' states, failing with the states after `within`.
async fn until(
    client: &Client,
    ids: &[RunId],
    within: Duration,
    done: impl Fn(&[toolq::Run]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut runs = Vec::new();
        for id in ids {
            runs.push(client.get(id).await.unwrap());
        }
        if done(&runs) {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let seen: Vec<String> = runs
                .iter()
                .filter(|r| r.state != RunState::Completed)
                .map(|r| format!("{} {} {:?}", r.id, r.state, r.waiting))
                .collect();
            panic!("timed out; runs not completed: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_racing_the_suspend_commit_are_never_lost_nor_used_twice() {
    const RUNS: usize = 80;
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    let taken: Taken = Default::default();
    let a = client(&db, 4, &taken);
    let b = client(&db, 4, &taken);
    let ids = enqueue(&a, "waiter", json!({}), RUNS).await;
    let stop = CancellationToken::new();
    let workers = [
        tokio::spawn(a.worker(Default::default()).run(stop.clone())),
        tokio::spawn(b.worker(Default::default()).run(stop.clone())),
    ];
    // Each run's "go" at a random moment over the time the workers take to claim and suspend
    // them all: some before the run is claimed, some while it runs towards its wait, some
    // racing the suspension's commit, some after. So that both ends are met however fast the
    // machine is, every eighth run's "go" waits until the run is seen suspended, and the last
    // eight runs' (claimed last) go at once.
    let sends = ids.iter().enumerate().map(|(i, id)| {
        let (client, id) = (&a, id.clone());
        async move {
            if i % 8 == 0 {
                until_suspended(client, &id).await;
            } else if i < RUNS - 8 {
                let delay = rand::random_range(0..=400u64);
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            let before = client.get(&id).await.unwrap();
            let sent = client
                .signal(&id, "go", json!({ "run": id.to_string() }), None)
                .await
                .unwrap();
            (before.waiting.is_some(), sent.woke)
        }
    });
    let sent = futures_util::future::join_all(sends).await;
    until(&a, &ids, Duration::from_secs(60), |runs| {
        runs.iter().all(|r| r.state == RunState::Completed)
    })
    .await;
    stop.cancel();
    for w in workers {
        w.await.unwrap().unwrap();
    }

    let taken = taken.lock().unwrap().clone();
    for id in &ids {
        let run = a.get(id).await.unwrap();
        assert_eq!(run.attempt, 1, "run {id}: a wait uses no attempt");
        let result: Value =
            serde_json::from_slice(&a.result(&run).await.unwrap().unwrap().content).unwrap();
        assert_eq!(
            result["result"],
            json!({ "run": id.to_string() }),
            "run {id}"
        );
        assert_eq!(
            taken.get(id.as_str()),
            Some(&1),
            "run {id}: its event taken once"
        );
        let journal = a.journal(id).await.unwrap();
        assert_eq!(journal.events.len(), 1);
        assert!(journal.events[0].consumed_at.is_some(), "run {id}");
        let steps: Vec<(&str, &str)> = journal
            .steps
            .iter()
            .map(|s| (s.name.as_str(), s.status.as_str()))
            .collect();
        assert_eq!(steps, [("event:go", "done")], "run {id}");
        assert_eq!(
            db.count(&format!("SELECT count(*) FROM inbox WHERE run_id = '{id}'")),
            1,
            "run {id}: one message"
        );
    }
    let waiting_then = sent.iter().filter(|(w, _)| *w).count();
    let woke = sent.iter().filter(|(_, w)| *w).count();
    eprintln!(
        "event race: {RUNS} runs; \"go\" found {waiting_then} runs suspended and woke {woke}, \
         {} came before the run suspended",
        RUNS - woke
    );
    assert!(
        woke > 0 && woke < RUNS,
        "signals both before and after the suspensions: {woke} of {RUNS} woke a run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_concurrency_1_completes_other_runs_while_50_wait() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    let taken: Taken = Default::default();
    let client = client(&db, 1, &taken);
    // The waiting runs come first: each is claimed, suspends, and frees the one slot.
    let waiting = enqueue(&client, "waiter", json!({}), 50).await;
    let quick = enqueue(&client, "echo", json!({"message": "hi"}), 10).await;
    let stop = CancellationToken::new();
    let worker = tokio::spawn(client.worker(Default::default()).run(stop.clone()));
    until(&client, &quick, Duration::from_secs(60), |runs| {
        runs.iter().all(|r| r.state == RunState::Completed)
    })
    .await;
    for id in &waiting {
        let run = client.get(id).await.unwrap();
        assert_eq!(run.state, RunState::Queued, "run {id}");
        let w = run.waiting.expect("the run waits for its event");
        assert_eq!((w.kind, w.event.as_deref()), (WaitKind::Event, Some("go")));
        assert!(run.lease_owner.is_none());
    }
    assert_eq!(
        db.count("SELECT count(*) FROM runs WHERE state = 'running'"),
        0,
        "no waiting run holds the slot"
    );
    for id in &waiting {
        let sent = client
            .signal(id, "go", json!({ "run": id.to_string() }), None)
            .await
            .unwrap();
        assert!(sent.woke);
    }
    until(&client, &waiting, Duration::from_secs(60), |runs| {
        runs.iter().all(|r| r.state == RunState::Completed)
    })
    .await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(db.count("SELECT count(*) FROM inbox"), 60);
}
