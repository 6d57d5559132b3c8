//! Per-tool retry policy (`[limits.NAME]`/`[tools.NAME]` max_attempts, backoff_base,
//! backoff_max, retry_on) and retention by outcome (`retention.failed_runs`,
//! `retention.cancelled_runs`): a real worker loop and the rescue, time moved by the manual
//! clock, and the `toolq` binary for `config` and `prune`.

use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::retention::PruneOptions;
use toolq::store::Claim;
use toolq::worker::rescue::rescue_tick;
use toolq::{Config, EnqueueRequest, Run, RunId, RunState, ScheduleRequest};

use crate::support::{TestEnv, toolq, wait_for};

/// A test env whose config also has the keys of `text` (retry policies, retention).
fn env_with(text: &str) -> TestEnv {
    let parsed = Config::parse(text, "test.toml").expect("the test config is valid");
    TestEnv::with_config(|c| {
        c.retry = parsed.retry.clone();
        c.retention = parsed.retention.clone();
    })
}

async fn enqueue(env: &TestEnv, tool: &str, args: Value, timeout: Option<Duration>) -> RunId {
    let mut req = EnqueueRequest::new(tool, args).session("s1");
    req.timeout = timeout;
    env.client.enqueue(req).await.unwrap().run_id
}

async fn wait_state(env: &TestEnv, id: &RunId, state: RunState, attempt: i64) -> Run {
    wait_for(&format!("{id} {state} at attempt {attempt}"), async || {
        let r = env.client.get(id).await.unwrap();
        let seen = format!("{} attempt {} error {:?}", r.state, r.attempt, r.error);
        (
            (r.state == state && r.attempt == attempt).then_some(r),
            seen,
        )
    })
    .await
}

/// Asserts `r` waits for its retry `nominal` from now, jittered by a factor in [0.5, 1.5).
fn assert_backoff(env: &TestEnv, r: &Run, nominal: chrono::Duration) {
    let delay = r.run_at - env.client.now();
    assert!(
        delay >= nominal / 2 && delay < nominal * 3 / 2,
        "{}: waits {delay}, nominal {nominal}",
        r.tool
    );
}

const POLICIES: &str = r#"
[limits.divide]
max_attempts = 2
backoff_base = "30s"
backoff_max = "30s"
retry_on = ["tool_error"]

[limits.fail]
retry_on = ["timeout", "worker_lost"]

[limits.sleep]
max_attempts = 4

[limits.hang]
max_attempts = 2
backoff_base = "20s"
backoff_max = "20s"
retry_on = ["timeout"]
"#;

#[tokio::test]
async fn each_failure_kind_retries_as_its_tools_policy_says() {
    let env = env_with(POLICIES);
    // A tool error (1/0) retries for divide, after divide's backoff, up to divide's attempts.
    let divide = enqueue(&env, "divide", json!({"a": 1, "b": 0}), None).await;
    // An internal error does not, for fail: its retry_on leaves internal_error out.
    let fail = enqueue(&env, "fail", json!({}), None).await;
    // A timeout retries for hang, after hang's backoff.
    let hang = enqueue(&env, "hang", json!({}), Some(Duration::from_millis(100))).await;
    // The run's own max_attempts wins over the tool's.
    let mut own = EnqueueRequest::new("divide", json!({"a": 2, "b": 0})).session("s1");
    own.max_attempts = Some(1);
    let own = env.client.enqueue(own).await.unwrap().run_id;
    let attempts = async |id: &RunId| env.client.get(id).await.unwrap().max_attempts;
    assert_eq!(attempts(&divide).await, 2, "divide's max_attempts");
    assert_eq!(attempts(&fail).await, 3, "runs.max_attempts");
    assert_eq!(attempts(&own).await, 1, "the run's own");

    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(
        env.client
            .worker(toolq::WorkerOptions::default())
            .run(shutdown.clone()),
    );
    let r = wait_state(&env, &divide, RunState::Queued, 1).await;
    assert_backoff(&env, &r, chrono::Duration::seconds(30));
    let r = wait_state(&env, &hang, RunState::Queued, 1).await;
    assert_eq!(r.error.as_deref(), Some("timed out after 100ms"));
    assert_backoff(&env, &r, chrono::Duration::seconds(20));
    let r = wait_state(&env, &fail, RunState::Failed, 1).await;
    assert_eq!(r.errors.as_array().unwrap().len(), 1);
    wait_state(&env, &own, RunState::Failed, 1).await;

    env.clock.advance(chrono::Duration::seconds(60));
    let r = wait_state(&env, &divide, RunState::Failed, 2).await;
    assert_eq!(r.errors.as_array().unwrap().len(), 2);
    let r = wait_state(&env, &hang, RunState::Failed, 2).await;
    assert_eq!(r.error.as_deref(), Some("timed out after 100ms"));
    shutdown.cancel();
    worker.await.unwrap().unwrap();
}

#[tokio::test]
async fn schedules_and_batches_take_the_tools_max_attempts() {
    let env = env_with(POLICIES);
    let s = env
        .client
        .create_schedule(ScheduleRequest::cron(
            "divide",
            json!({"a": 1, "b": 1}),
            "0 * * * *",
        ))
        .await
        .unwrap();
    assert_eq!(s.max_attempts, 2);
    let mut req = ScheduleRequest::cron("divide", json!({"a": 1, "b": 1}), "0 * * * *");
    req.max_attempts = Some(7);
    let s = env.client.create_schedule(req).await.unwrap();
    assert_eq!(s.max_attempts, 7, "the schedule's own count wins");

    // A batch's runs and its callback run: divide's count too.
    let created = env
        .client
        .create_batch(
            toolq::BatchRequest {
                session: "s1".into(),
                title: None,
                on_complete: Some(toolq::OnComplete {
                    tool: "divide".into(),
                    args: json!({"a": 1, "b": 1}),
                }),
            },
            vec![EnqueueRequest::new("divide", json!({"a": 4, "b": 2})).session("s1")],
        )
        .await
        .unwrap();
    let run = env.client.get(&created.runs[0].run_id).await.unwrap();
    assert_eq!(run.max_attempts, 2);
    env.drain().await;
    let b = env.client.batch(&created.batch_id).await.unwrap();
    let callback: RunId = b.callback_run_id.expect("a callback run").parse().unwrap();
    assert_eq!(env.client.get(&callback).await.unwrap().max_attempts, 2);

    // A run spawn_background starts: its tool's count too.
    let spawn = env
        .client
        .registry()
        .get("spawn_background")
        .unwrap()
        .tool
        .clone();
    let ctx = toolq::ToolContext {
        run_id: RunId::generate(),
        session_id: "s1".into(),
        title: "Spawn".into(),
        args: json!({"tool": "sleep", "args": {"ms": 0}}),
        attempt: 1,
        sink: toolq::RunSink::new(toolq::tool::sink::SinkLimits::default()),
        cancel: CancellationToken::new(),
        stop: Default::default(),
        operation_id: None,
        clock: env.client.clock().clone(),
        host: Some(env.client.tool_host()),
        durable: Default::default(),
    };
    let s = match spawn.call(ctx).await {
        toolq::ToolOutcome::Success(s) => s,
        other => panic!("spawn_background: {other:?}"),
    };
    let spawned: RunId = s.value["run_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(env.client.get(&spawned).await.unwrap().max_attempts, 4);
}

/// A claim through the engine contract by a worker that has no row, so the next rescue
/// takes the runs back as lost.
async fn claim_by_a_lost_worker(env: &TestEnv) -> Vec<Run> {
    let now = env.client.now();
    env.client
        .engine()
        .attempt_claim(Claim {
            worker: "wk_lost".into(),
            now,
            lease_until: now + chrono::Duration::seconds(30),
            max: 10,
            per_session: 5,
            after_session: None,
            tools: env.client.registry().names().into(),
            limits: Default::default(),
            background_room: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_lost_worker_is_retried_as_the_tools_policy_says() {
    let env = env_with(
        r#"
[limits.echo]
retry_on = ["internal_error"]

[limits.add]
backoff_base = "40s"
backoff_max = "1m"
"#,
    );
    let echo = enqueue(&env, "echo", json!({"message": "hi"}), None).await;
    let add = enqueue(&env, "add", json!({"a": 1, "b": 2}), None).await;
    assert_eq!(claim_by_a_lost_worker(&env).await.len(), 2);
    let report = rescue_tick(env.client.core()).await.unwrap();
    assert_eq!((report.requeued, report.failed), (1, 1), "{report:?}");
    // echo's policy leaves worker_lost out: failed at its first attempt.
    let r = env.client.get(&echo).await.unwrap();
    assert_eq!((r.state, r.attempt), (RunState::Failed, 1));
    assert!(r.error.unwrap().starts_with("worker lost"));
    // add keeps the default retry_on, with its own backoff.
    let r = env.client.get(&add).await.unwrap();
    assert_eq!((r.state, r.attempt), (RunState::Queued, 1));
    assert_backoff(&env, &r, chrono::Duration::seconds(40));
}

fn write_config(env: &TestEnv, text: &str) -> String {
    let path = env.dir.path().join("policy.toml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn config_shows_each_tools_policy_and_refuses_a_key_given_twice() {
    let env = TestEnv::new();
    let text = "[limits.http_request]\nmax_attempts = 5\nretry_on = [\"timeout\"]\n\n\
                [tools.nightly]\ncommand = [\"true\"]\nbackoff_base = \"2s\"\n";
    let path = write_config(&env, text);
    let out = toolq(env.db_path(), &["--config", &path, "config"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    println!("{stdout}");
    let line = |tool: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("#   {tool}: ")))
            .unwrap_or_else(|| panic!("no policy line for {tool}: {stdout}"))
            .to_string()
    };
    let http = line("http_request");
    assert!(
        http.contains("max_attempts = 5 (limits.http_request.max_attempts, ")
            && http.contains("line 2)"),
        "{http}"
    );
    assert!(http.contains("retry_on = [\"timeout\"]"), "{http}");
    assert!(
        http.contains("backoff_base = \"1s\" (runs.backoff_base, built-in default)"),
        "{http}"
    );
    let nightly = line("nightly");
    assert!(
        nightly.contains("backoff_base = \"2s\" (tools.nightly.backoff_base"),
        "{nightly}"
    );
    assert!(
        line("*").contains(
            "retry_on = [\"internal_error\",\"timeout\",\"worker_lost\"] (built-in default)"
        ),
        "{stdout}"
    );

    let out = toolq(env.db_path(), &["--config", &path, "--json", "config"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let policies = v["retry_policies"].as_array().unwrap();
    let http = policies
        .iter()
        .find(|p| p["tool"] == "http_request")
        .unwrap();
    assert_eq!(http["max_attempts"]["value"], 5);
    assert_eq!(
        http["max_attempts"]["key"],
        "limits.http_request.max_attempts"
    );
    assert_eq!(http["max_attempts"]["source"], "file");
    assert_eq!(http["retry_on"]["value"], json!(["timeout"]));
    assert_eq!(http["backoff_max"]["value"], "10m");
    let echo = policies.iter().find(|p| p["tool"] == "echo").unwrap();
    assert_eq!(echo["retry_on"]["key"], Value::Null);
    assert_eq!(echo["max_attempts"]["key"], "runs.max_attempts");

    // The same key in both tables, and bad values: exit 2 naming the key, nothing written.
    for (text, names) in [
        (
            "[tools.nightly]\ncommand = [\"true\"]\nmax_attempts = 2\n\
             [limits.nightly]\nmax_attempts = 4\n",
            vec!["tools.nightly.max_attempts", "limits.nightly.max_attempts"],
        ),
        (
            "[limits.echo]\nretry_on = [\"tool_error\", \"oops\"]\n",
            vec!["limits.echo.retry_on", "oops", "worker_lost"],
        ),
        (
            "[limits.echo]\nmax_attempts = 0\n",
            vec!["limits.echo.max_attempts"],
        ),
        (
            "[limits.echo]\nbackoff_base = \"20m\"\n",
            vec!["limits.echo.backoff_base", "10m"],
        ),
    ] {
        let path = write_config(&env, text);
        for args in [vec!["config"], vec!["enqueue", "echo", "--args", "{}"]] {
            let mut all = vec!["--config", path.as_str()];
            all.extend(args.iter());
            let out = toolq(env.db_path(), &all);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
            for name in &names {
                assert!(stderr.contains(name), "{text}: {name} not in {stderr}");
            }
        }
    }
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
}

/// Finishes one completed, one failed and one cancelled run now; their ids.
async fn finish_one_of_each(env: &TestEnv) -> [RunId; 3] {
    let ok = enqueue(env, "echo", json!({"message": "ok"}), None).await;
    let failed = enqueue(env, "divide", json!({"a": 1, "b": 0}), None).await;
    let mut later = EnqueueRequest::new("echo", json!({"message": "later"})).session("s1");
    later.run_at = Some(env.client.now() + chrono::Duration::days(1));
    let cancelled = env.client.enqueue(later).await.unwrap().run_id;
    env.client.cancel(&cancelled).await.unwrap();
    env.drain().await;
    // Acknowledged, so no unread message keeps a run.
    let ids: Vec<i64> = env
        .client
        .inbox(
            "s1",
            toolq::inbox::InboxFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    env.client.mark_inbox("s1", ids, true).await.unwrap();
    [ok, failed, cancelled]
}

#[tokio::test]
async fn each_outcome_is_kept_as_long_as_its_own_retention_says() {
    let env = env_with("[retention]\nfailed_runs = \"30d\"\ncancelled_runs = \"2d\"\n");
    let [ok, failed, cancelled] = finish_one_of_each(&env).await;
    let exists = async |id: &RunId| env.client.get(id).await.is_ok();
    let dry = PruneOptions {
        dry_run: true,
        ..Default::default()
    };

    env.clock.advance(chrono::Duration::days(3));
    let report = env.client.prune(dry.clone()).await.unwrap();
    let r = &report.removed;
    assert_eq!(
        (r.runs, r.runs_completed, r.runs_failed, r.runs_cancelled),
        (1, 0, 0, 1),
        "{report:?}"
    );
    assert!(r.blobs >= 1, "the cancelled run's result: {report:?}");

    env.clock.advance(chrono::Duration::days(5));
    let report = env.client.prune(dry.clone()).await.unwrap();
    let r = &report.removed;
    assert_eq!(
        (r.runs, r.runs_completed, r.runs_failed, r.runs_cancelled),
        (2, 1, 0, 1)
    );
    let report = env.client.prune(PruneOptions::default()).await.unwrap();
    let r = &report.removed;
    assert_eq!(
        (r.runs, r.runs_completed, r.runs_failed, r.runs_cancelled),
        (2, 1, 0, 1),
        "{report:?}"
    );
    assert!(!exists(&ok).await && !exists(&cancelled).await);
    assert!(exists(&failed).await, "failures are kept 30 days");

    env.clock.advance(chrono::Duration::days(23));
    let report = env.client.prune(PruneOptions::default()).await.unwrap();
    assert_eq!(
        (report.removed.runs, report.removed.runs_failed),
        (1, 1),
        "{report:?}"
    );
    assert!(!exists(&failed).await);
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
    assert_eq!(env.count("SELECT count(*) FROM blobs"), 0);
}

#[tokio::test]
async fn prune_dry_run_prints_the_counts_by_outcome() {
    let env = TestEnv::new();
    finish_one_of_each(&env).await;
    finish_one_of_each(&env).await;
    let out = toolq(
        env.db_path(),
        &["--json", "prune", "--dry-run", "--older-than", "1s"],
    );
    assert!(out.status.success(), "{:?}", out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["removed"];
    assert_eq!(
        (
            &r["runs"],
            &r["runs_completed"],
            &r["runs_failed"],
            &r["runs_cancelled"]
        ),
        (&json!(6), &json!(2), &json!(2), &json!(2)),
        "{v}"
    );
    assert!(v["failed_runs_before"].is_string() && v["cancelled_runs_before"].is_string());
    let out = toolq(env.db_path(), &["prune", "--dry-run", "--older-than", "1s"]);
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("6 (completed 2, failed 2, cancelled 2)"),
        "{text}"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM runs"),
        6,
        "a dry run deletes nothing"
    );
}
