//! Leases, fencing and rescue at library level, with two worker ids and the manual clock.

use serde_json::{Value, json};
use toolq::inbox::InboxFilter;
use toolq::run::FinishRecord;
use toolq::store::codec::ts;
use toolq::store::{Claim, Flush, Heartbeat, WorkerRow};
use toolq::tool::sink::SinkSnapshot;
use toolq::worker::finish::{AttemptEnd, decide};
use toolq::worker::identity;
use toolq::worker::rescue::rescue_tick;
use toolq::{EnqueueRequest, Run, RunId, RunState, ToolOutcome};

use crate::support::TestEnv;

async fn register(env: &TestEnv, id: &str, host: &str, pid: i64, start: &str) {
    let now = ts(env.client.now());
    let row = WorkerRow {
        id: id.into(),
        host: host.into(),
        boot_id: identity::boot_id(),
        pid_namespace: identity::pid_namespace(),
        pid,
        process_start_time: start.into(),
        started_at: now.clone(),
        heartbeat_at: now,
        last_poll_at: None,
        stopped_at: None,
        stop_reason: None,
        concurrency: 4,
        poll_interval_ms: 20,
        heartbeat_interval_ms: 200,
        lease_ms: 30_000,
        busy_retries: 0,
        version: "test".into(),
        tools: Vec::new(),
    };
    env.client.engine().worker_register(row).await.unwrap();
}

async fn claim_as(env: &TestEnv, worker: &str) -> Vec<Run> {
    claim_tools(env, worker, &env.client.registry().names()).await
}

/// A claim through the engine contract, as a worker's claim loop makes it.
async fn claim_tools(env: &TestEnv, worker: &str, tools: &[String]) -> Vec<Run> {
    let now = env.client.now();
    env.client
        .engine()
        .attempt_claim(Claim {
            worker: worker.into(),
            now,
            lease_until: now + chrono::Duration::seconds(30),
            max: 10,
            per_session: 5,
            after_session: None,
            tools: tools.into(),
            limits: Default::default(),
            background_room: None,
        })
        .await
        .unwrap()
}

fn success_record(env: &TestEnv, run: &Run) -> FinishRecord {
    decide(
        run,
        AttemptEnd::Returned(ToolOutcome::ok(json!({"by": run.attempt}))),
        SinkSnapshot::default(),
        &env.client.config().runs,
        &env.client.config().retry_policy(&run.tool),
        env.client.now(),
        0.5,
    )
}

async fn finish(env: &TestEnv, rec: &FinishRecord) -> bool {
    let now = env.client.now();
    env.client
        .engine()
        .run_end(vec![rec.clone()], now)
        .await
        .unwrap()
        == [true]
}

pub(crate) async fn enqueue(
    env: &TestEnv,
    tool: &str,
    args: Value,
    max_attempts: Option<i64>,
) -> RunId {
    let mut req = EnqueueRequest::new(tool, args).session("s1");
    req.max_attempts = max_attempts;
    env.client.enqueue(req).await.unwrap().run_id
}

pub(crate) async fn inbox(env: &TestEnv) -> Vec<toolq::inbox::Message> {
    let f = InboxFilter {
        limit: 100,
        ..Default::default()
    };
    env.client.inbox("s1", f).await.unwrap()
}

/// A pid that certainly belonged to a process that is gone: a child we ran and reaped.
fn gone_pid() -> i64 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id() as i64;
    child.wait().unwrap();
    pid
}

#[tokio::test]
async fn stale_attempt_is_fenced_out_after_a_lease_rescue() {
    let env = TestEnv::new();
    let id = enqueue(&env, "echo", json!({"message": "hi"}), None).await;
    assert_eq!(env.client.get(&id).await.unwrap().max_attempts, 3);
    // Two workers on another host: their pids cannot be checked, only their leases.
    register(&env, "wk_a", "elsewhere", 1, "1").await;
    register(&env, "wk_b", "elsewhere", 2, "2").await;
    let first = claim_as(&env, "wk_a").await.remove(0);
    assert_eq!(first.attempt, 1);
    assert_eq!(rescue_tick(env.client.core()).await.unwrap().rescued(), 0);

    env.clock.advance(chrono::Duration::seconds(31));
    let report = rescue_tick(env.client.core()).await.unwrap();
    assert_eq!((report.requeued, report.failed), (1, 0), "{report:?}");
    let run = env.client.get(&id).await.unwrap();
    assert_eq!((run.state, run.attempt), (RunState::Queued, 1));
    assert!(run.lease_token.is_none() && run.lease_owner.is_none());
    let errors = run.errors.as_array().unwrap();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors[0]["error"],
        "worker lost: its lease expired without a heartbeat"
    );
    let delay = run.run_at - env.client.now();
    assert!(
        delay >= chrono::Duration::milliseconds(500)
            && delay < chrono::Duration::milliseconds(1500),
        "{delay}"
    );

    env.clock.advance(chrono::Duration::seconds(2));
    let second = claim_as(&env, "wk_b").await.remove(0);
    assert_eq!(second.attempt, 2);
    assert_ne!(second.lease_token, first.lease_token);

    // The first attempt comes back late: nothing of it is written.
    assert!(!finish(&env, &success_record(&env, &first)).await);
    let progress = toolq::store::ProgressWrite {
        id: first.id.to_string(),
        session_id: first.session_id.clone(),
        attempt: first.attempt,
        token: first.lease_token.clone().unwrap(),
        status_text: Some("stale".into()),
        progress: None,
        output_tail: None,
        log: Some((b"stale log".to_vec(), false)),
    };
    let now = env.client.now();
    let wrote = env
        .client
        .engine()
        .attempt_flush(Flush {
            operations: Vec::new(),
            progress: vec![progress],
            now,
        })
        .await
        .unwrap();
    assert_eq!(wrote.progress, [false]);
    let run = env.client.get(&id).await.unwrap();
    assert_eq!((run.state, run.attempt), (RunState::Running, 2));
    assert_eq!(run.lease_owner.as_deref(), Some("wk_b"));
    assert_eq!(run.status_text, None);
    assert_eq!(env.count("SELECT count(*) FROM blobs"), 0);
    assert!(inbox(&env).await.is_empty());

    // The current attempt finishes normally, exactly once.
    assert!(finish(&env, &success_record(&env, &second)).await);
    assert!(!finish(&env, &success_record(&env, &second)).await);
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Completed);
    let result = env.client.result(&run).await.unwrap().unwrap();
    let v: Value = serde_json::from_slice(&result.content).unwrap();
    assert_eq!(v["result"], json!({"by": 2}));
    let msgs = inbox(&env).await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].kind, "completed");
}

#[tokio::test]
async fn a_heartbeating_owner_is_never_rescued() {
    let env = TestEnv::new();
    let id = enqueue(&env, "echo", json!({"message": "hi"}), None).await;
    register(&env, "wk_a", "elsewhere", 1, "1").await;
    let run = claim_as(&env, "wk_a").await.remove(0);
    let held = vec![(id.to_string(), run.lease_token.clone().unwrap())];
    for _ in 0..30 {
        env.clock.advance(chrono::Duration::seconds(10));
        let now = env.client.now();
        let alive = env
            .client
            .engine()
            .attempt_heartbeat(Heartbeat {
                worker: "wk_a".into(),
                held: held.clone(),
                now,
                until: now + chrono::Duration::seconds(30),
                last_poll: None,
                busy_retries: 0,
            })
            .await
            .unwrap();
        assert_eq!(alive, vec![(id.to_string(), false)]);
        assert_eq!(rescue_tick(env.client.core()).await.unwrap().rescued(), 0);
    }
    assert_eq!(env.client.get(&id).await.unwrap().state, RunState::Running);
    // It stops heartbeating: after the lease it is taken back.
    env.clock.advance(chrono::Duration::seconds(31));
    assert_eq!(rescue_tick(env.client.core()).await.unwrap().requeued, 1);
}

#[tokio::test]
async fn runs_of_a_dead_local_process_are_rescued_without_waiting_for_the_lease() {
    let env = TestEnv::new();
    let retried = enqueue(&env, "echo", json!({"message": "hi"}), None).await;
    let last = enqueue(&env, "echo", json!({"message": "hi"}), Some(1)).await;
    let me = std::process::id();
    let my_start = identity::process_start_time(me).unwrap();
    register(&env, "wk_dead", &identity::host(), gone_pid(), "12345").await;
    register(&env, "wk_live", &identity::host(), me as i64, &my_start).await;
    let claimed = claim_as(&env, "wk_dead").await;
    assert_eq!(claimed.len(), 2);
    let live_run = enqueue(&env, "echo", json!({"message": "hi"}), None).await;
    assert_eq!(claim_as(&env, "wk_live").await.len(), 1);

    // Same instant: no lease has expired, yet the dead owner's runs come back.
    let report = rescue_tick(env.client.core()).await.unwrap();
    assert_eq!(report.workers_died, 1, "{report:?}");
    assert_eq!((report.requeued, report.failed), (1, 1), "{report:?}");

    let r = env.client.get(&retried).await.unwrap();
    assert_eq!((r.state, r.attempt), (RunState::Queued, 1));
    assert_eq!(
        r.errors[0]["error"],
        "worker lost: the worker process running it died"
    );
    assert!(
        r.errors[0]["internal_error"]
            .as_str()
            .unwrap()
            .contains("wk_dead")
    );

    let r = env.client.get(&last).await.unwrap();
    assert_eq!(r.state, RunState::Failed);
    let err = "worker lost: the worker process running it died";
    assert_eq!(r.error.as_deref(), Some(err));
    let blob = env.client.result(&r).await.unwrap().unwrap();
    let v: Value = serde_json::from_slice(&blob.content).unwrap();
    assert_eq!(v, json!({"status": "failed", "error": err}));
    let msgs = inbox(&env).await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(
        (msgs[0].kind.as_str(), msgs[0].run_id.as_deref()),
        ("failed", Some(last.as_str()))
    );
    assert!(msgs[0].body.contains(err), "{}", msgs[0].body);

    // The live owner (this very process) keeps its run; the dead row is marked stopped.
    assert_eq!(
        env.client.get(&live_run).await.unwrap().state,
        RunState::Running
    );
    assert_eq!(
        env.count("SELECT count(*) FROM workers WHERE id = 'wk_dead' AND stop_reason = 'died' AND stopped_at IS NOT NULL"),
        1
    );
    assert_eq!(
        env.count("SELECT count(*) FROM workers WHERE stopped_at IS NULL"),
        1
    );
    let status = toolq::status::status(&env.client, true).await.unwrap();
    let dead = status
        .workers
        .iter()
        .find(|w| w.row.id == "wk_dead")
        .unwrap();
    assert_eq!(dead.liveness, toolq::status::Liveness::Stopped);
    let live = status
        .workers
        .iter()
        .find(|w| w.row.id == "wk_live")
        .unwrap();
    assert_ne!(live.liveness, toolq::status::Liveness::Dead);

    // A second pass finds nothing more to do.
    assert_eq!(
        rescue_tick(env.client.core()).await.unwrap(),
        Default::default()
    );
}

#[tokio::test]
async fn a_run_whose_owner_has_no_row_or_stopped_is_rescued_at_once() {
    let env = TestEnv::new();
    let a = enqueue(&env, "echo", json!({"message": "hi"}), None).await;
    claim_as(&env, "wk_unregistered").await;
    let report = rescue_tick(env.client.core()).await.unwrap();
    assert_eq!(report.requeued, 1);
    let r = env.client.get(&a).await.unwrap();
    assert_eq!(
        r.errors[0]["error"],
        "worker lost: the worker running it is not registered"
    );

    register(&env, "wk_gone", "elsewhere", 1, "1").await;
    env.clock.advance(chrono::Duration::seconds(5));
    claim_as(&env, "wk_gone").await;
    let now = env.client.now();
    env.client
        .engine()
        .worker_deregister("wk_gone".into(), now, 0)
        .await
        .unwrap();
    assert_eq!(rescue_tick(env.client.core()).await.unwrap().requeued, 1);
    let r = env.client.get(&a).await.unwrap();
    assert_eq!(r.attempt, 2);
    assert_eq!(r.errors.as_array().unwrap().len(), 2);
    assert_eq!(
        r.errors[1]["error"],
        "worker lost: the worker running it stopped without finishing it"
    );
}

/// A claim takes runs of the claiming worker's tools only, in priority order across them;
/// a run of another tool stays queued with its attempts unused.
#[tokio::test]
async fn a_claim_takes_runs_of_its_tools_only_in_priority_order_across_them() {
    let env = TestEnv::new();
    let mut ids = Vec::new();
    for (tool, args, priority) in [
        ("echo", json!({"message": "low"}), 0),
        ("add", json!({"a": 1, "b": 2}), 5),
        ("sleep", json!({"ms": 1}), 9),
    ] {
        let mut req = EnqueueRequest::new(tool, args).session("s1");
        req.priority = priority;
        ids.push(env.client.enqueue(req).await.unwrap().run_id);
    }
    let claimed = claim_tools(&env, "wk_a", &["add".to_string(), "echo".to_string()]).await;
    let got: Vec<&RunId> = claimed.iter().map(|r| &r.id).collect();
    assert_eq!(got, [&ids[1], &ids[0]]);
    let sleep = env.client.get(&ids[2]).await.unwrap();
    assert_eq!((sleep.state, sleep.attempt), (RunState::Queued, 0));
    // A worker that has it takes it.
    let claimed = claim_tools(&env, "wk_b", &["sleep".to_string()]).await;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, ids[2]);
}
