//! Composition through the library on a real worker: a batch completes with exactly one
//! message (and its callback), dependencies block, release and cancel in the end's
//! transaction, a retry reopens a batch and re-arms a dependent, and bad links are refused
//! with nothing written.

use serde_json::json;
use toolq::core::{BatchRequest, OnComplete};
use toolq::inbox::InboxFilter;
use toolq::run::{BatchFilter, Linked};
use toolq::{EnqueueRequest, RunState, WaitKind};

use crate::support::TestEnv;

fn echo(msg: &str) -> EnqueueRequest {
    EnqueueRequest::new("echo", json!({"message": msg}))
}

fn fail() -> EnqueueRequest {
    EnqueueRequest {
        max_attempts: Some(1),
        ..EnqueueRequest::new("fail", json!({}))
    }
}

async fn batch_messages(env: &TestEnv, session: &str) -> Vec<toolq::inbox::Message> {
    env.client
        .inbox(
            session,
            InboxFilter {
                limit: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.kind == "batch_completed")
        .collect()
}

#[tokio::test]
async fn a_batch_completes_once_with_its_message_and_callback() {
    let env = TestEnv::new();
    let created = env
        .client
        .create_batch(
            BatchRequest {
                session: "s".into(),
                title: Some("nightly".into()),
                on_complete: Some(OnComplete {
                    tool: "echo".into(),
                    args: json!({"message": "all done"}),
                }),
            },
            vec![echo("a"), echo("b"), fail()],
        )
        .await
        .unwrap();
    assert!(created.batch_id.as_str().starts_with("bt_"));
    assert_eq!(created.runs.len(), 3);
    let b = env.client.batch(&created.batch_id).await.unwrap();
    assert_eq!((b.total, b.pending, b.state), (3, 3, "running"));
    env.drain().await;
    let b = env.client.batch(&created.batch_id).await.unwrap();
    assert_eq!(
        (b.state, b.pending, b.completed, b.failed, b.cancelled),
        ("completed", 0, 2, 1, 0)
    );
    assert_eq!(b.first_failures.len(), 1);
    let msgs = batch_messages(&env, "s").await;
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].data["batch_id"], json!(created.batch_id.as_str()));
    assert_eq!(msgs[0].data["failed"], json!(1));
    assert!(msgs[0].run_id.is_none());
    let cb = b.callback_run_id.clone().expect("a callback run");
    let cb_id: toolq::RunId = cb.parse().unwrap();
    let run = env.client.get(&cb_id).await.unwrap();
    assert_eq!(run.state, RunState::Completed, "the drain ran the callback");
    let parents = env
        .client
        .core()
        .linked_results(&cb_id, Linked::Parents)
        .await
        .unwrap();
    assert_eq!(parents.len(), 1);
    assert_eq!(parents[0].id, created.batch_id.as_str());
    assert_eq!(parents[0].result["completed"], json!(2));
    let listed = env
        .client
        .batches(BatchFilter {
            session: Some("s".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
}

#[tokio::test]
async fn a_retry_reopens_a_batch_and_its_next_completion_sends_a_new_message() {
    let env = TestEnv::new();
    let created = env
        .client
        .create_batch(
            BatchRequest {
                session: "s".into(),
                ..Default::default()
            },
            vec![echo("a"), fail()],
        )
        .await
        .unwrap();
    env.drain().await;
    assert_eq!(batch_messages(&env, "s").await.len(), 1);
    let failed = created.runs[1].run_id.clone();
    env.client.retry(&failed).await.unwrap();
    let b = env.client.batch(&created.batch_id).await.unwrap();
    assert_eq!((b.state, b.pending, b.failed), ("running", 1, 0));
    env.drain().await;
    let b = env.client.batch(&created.batch_id).await.unwrap();
    assert_eq!((b.state, b.completions, b.failed), ("completed", 2, 1));
    assert_eq!(batch_messages(&env, "s").await.len(), 2);
}

#[tokio::test]
async fn a_chain_runs_in_order_and_a_child_waits_blocked() {
    let env = TestEnv::new();
    let a = env.client.enqueue(echo("a")).await.unwrap().run_id;
    let b = env
        .client
        .enqueue(echo("b").after([a.clone()]))
        .await
        .unwrap()
        .run_id;
    let c = env
        .client
        .enqueue(echo("c").after([b.clone()]))
        .await
        .unwrap()
        .run_id;
    let rb = env.client.get(&b).await.unwrap();
    assert_eq!(rb.state, RunState::Queued);
    assert_eq!(rb.deps_pending, 1);
    assert_eq!(rb.waiting.as_ref().map(|w| w.kind), Some(WaitKind::Parents));
    let links = env.client.links(&b).await.unwrap();
    assert_eq!(links.parents.len(), 1);
    assert_eq!(links.dependents.len(), 1);
    env.drain().await;
    let runs = [
        env.client.get(&a).await.unwrap(),
        env.client.get(&b).await.unwrap(),
        env.client.get(&c).await.unwrap(),
    ];
    for r in &runs {
        assert_eq!(r.state, RunState::Completed, "{r:?}");
        assert_eq!(r.deps_pending, 0);
    }
    assert!(runs[0].finished_at <= runs[1].started_at);
    assert!(runs[1].finished_at <= runs[2].started_at);
    let results = env
        .client
        .core()
        .linked_results(&c, Linked::Parents)
        .await
        .unwrap();
    assert_eq!(results[0].id, b.as_str());
    assert_eq!(results[0].state, "completed");
}

#[tokio::test]
async fn a_failed_parent_cancels_its_dependents_down_the_chain_and_after_any_runs() {
    let env = TestEnv::new();
    let p = env.client.enqueue(fail()).await.unwrap().run_id;
    let c1 = env
        .client
        .enqueue(echo("c1").after([p.clone()]))
        .await
        .unwrap()
        .run_id;
    let c2 = env
        .client
        .enqueue(echo("c2").after([c1.clone()]))
        .await
        .unwrap()
        .run_id;
    let any = env
        .client
        .enqueue(echo("any").after([p.clone()]).after_any(true))
        .await
        .unwrap()
        .run_id;
    env.drain().await;
    let r1 = env.client.get(&c1).await.unwrap();
    assert_eq!(r1.state, RunState::Cancelled);
    assert!(
        r1.error.as_deref().unwrap_or("").contains(p.as_str()),
        "{r1:?}"
    );
    let r2 = env.client.get(&c2).await.unwrap();
    assert_eq!(r2.state, RunState::Cancelled);
    assert!(
        r2.error.as_deref().unwrap_or("").contains(c1.as_str()),
        "{r2:?}"
    );
    assert_eq!(
        env.client.get(&any).await.unwrap().state,
        RunState::Completed
    );
    // One final message per run.
    let msgs = env
        .client
        .inbox(
            "default",
            InboxFilter {
                limit: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for id in [&c1, &c2] {
        let n = msgs
            .iter()
            .filter(|m| m.run_id.as_deref() == Some(id.as_str()))
            .count();
        assert_eq!(n, 1, "{id}: {msgs:?}");
    }
    // After a parent that already failed: cancelled at once.
    let late = env
        .client
        .enqueue(echo("late").after([p.clone()]))
        .await
        .unwrap()
        .run_id;
    let r = env.client.get(&late).await.unwrap();
    assert_eq!(r.state, RunState::Cancelled);
    assert!(r.error.as_deref().unwrap_or("").contains("failed"));
}

#[tokio::test]
async fn bad_links_are_refused_and_write_nothing() {
    let env = TestEnv::new();
    let unknown: toolq::RunId = "bg_0123456789abcdef0123456789abcdef".parse().unwrap();
    let e = env
        .client
        .enqueue(echo("x").after([unknown.clone()]))
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().contains(unknown.as_str()), "{e}");
    let cyc = vec![
        EnqueueRequest {
            after_requests: vec![1],
            ..echo("a")
        },
        EnqueueRequest {
            after_requests: vec![0],
            ..echo("b")
        },
    ];
    let e = env.client.enqueue_batch(cyc).await.unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().contains("cycle"), "{e}");
    let e = env
        .client
        .enqueue(EnqueueRequest {
            run_at: Some(env.client.now()),
            ..echo("x").after([unknown])
        })
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    let e = env
        .client
        .create_batch(BatchRequest::default(), Vec::new())
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
    assert_eq!(env.count("SELECT count(*) FROM batches"), 0);
}

#[tokio::test]
async fn a_run_cannot_join_a_completed_batch() {
    let env = TestEnv::new();
    let created = env
        .client
        .create_batch(BatchRequest::default(), vec![echo("a")])
        .await
        .unwrap();
    env.drain().await;
    let e = env
        .client
        .enqueue(EnqueueRequest {
            batch: Some(created.batch_id.clone()),
            ..echo("late")
        })
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().contains("completed"), "{e}");
    assert_eq!(env.count("SELECT count(*) FROM runs"), 1);
}

#[tokio::test]
async fn a_dag_in_one_call_runs_in_dependency_order() {
    let env = TestEnv::new();
    let reqs = vec![
        EnqueueRequest {
            after_requests: vec![1, 2],
            ..echo("join")
        },
        echo("left"),
        EnqueueRequest {
            after_requests: vec![1],
            ..echo("right")
        },
    ];
    let ids: Vec<_> = env
        .client
        .enqueue_batch(reqs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.run_id)
        .collect();
    assert_eq!(env.client.get(&ids[0]).await.unwrap().deps_pending, 2);
    env.drain().await;
    let join = env.client.get(&ids[0]).await.unwrap();
    let right = env.client.get(&ids[2]).await.unwrap();
    assert_eq!(join.state, RunState::Completed);
    assert!(right.finished_at <= join.started_at);
}

#[tokio::test]
async fn a_drain_does_not_wait_for_runs_blocked_behind_a_waiting_parent() {
    let env = TestEnv::new();
    let parent = env
        .client
        .enqueue(EnqueueRequest::new("await_event", json!({"event": "go"})))
        .await
        .unwrap()
        .run_id;
    let child = env
        .client
        .enqueue(echo("after").after([parent.clone()]))
        .await
        .unwrap()
        .run_id;
    env.drain().await;
    assert_eq!(
        env.client
            .get(&child)
            .await
            .unwrap()
            .waiting
            .map(|w| w.kind),
        Some(WaitKind::Parents)
    );
    env.client
        .signal(&parent, "go", json!(1), None)
        .await
        .unwrap();
    env.drain().await;
    assert_eq!(
        env.client.get(&child).await.unwrap().state,
        RunState::Completed
    );
}

/// Two clients (two connections, as two hosts would have) end a batch's last two runs at the
/// same moment, again and again: exactly one completion message each time.
#[tokio::test]
async fn two_hosts_ending_a_batchs_last_two_runs_at_once_complete_it_once() {
    use crate::engine_contract::{claim, lease_end};
    let env = TestEnv::new();
    let other = toolq::Client::open(
        env.db.config(),
        toolq::RegistryBuilder::new()
            .with_builtins()
            .build()
            .unwrap(),
    )
    .unwrap();
    for round in 0..20 {
        let session = format!("race-{round}");
        let created = env
            .client
            .create_batch(
                BatchRequest {
                    session: session.clone(),
                    ..Default::default()
                },
                vec![echo("a"), echo("b")],
            )
            .await
            .unwrap();
        let runs = claim(&env, "wk_a", 2).await;
        assert_eq!(runs.len(), 2);
        let now = env.client.now();
        let (a, b) = tokio::join!(
            env.client
                .engine()
                .run_end(vec![lease_end(&runs[0], RunState::Completed)], now),
            other
                .engine()
                .run_end(vec![lease_end(&runs[1], RunState::Completed)], now),
        );
        assert_eq!((a.unwrap(), b.unwrap()), (vec![true], vec![true]));
        let b = env.client.batch(&created.batch_id).await.unwrap();
        assert_eq!((b.state, b.completions, b.pending), ("completed", 1, 0));
        assert_eq!(
            batch_messages(&env, &session).await.len(),
            1,
            "round {round}"
        );
    }
}

/// `RunFilter { batch_id }` cancels a whole batch in bulk (some of its runs blocked behind
/// others of it): every run ends cancelled once, and the batch completes with one message.
#[tokio::test]
async fn a_bulk_cancel_of_a_batch_completes_it_once() {
    let env = TestEnv::new();
    let mut reqs: Vec<EnqueueRequest> = (0..300).map(|i| echo(&format!("r{i}"))).collect();
    for (i, r) in reqs.iter_mut().enumerate().skip(250) {
        r.after_requests = vec![i - 1];
    }
    let created = env
        .client
        .create_batch(
            BatchRequest {
                session: "bulk".into(),
                ..Default::default()
            },
            reqs,
        )
        .await
        .unwrap();
    let filter = toolq::run::RunFilter {
        batch_id: Some(created.batch_id.to_string()),
        ..Default::default()
    };
    let report = env
        .client
        .cancel_where(
            &filter,
            toolq::BulkOptions {
                batch_size: 64,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // The blocked tail is cancelled with the run it waits for, in that run's transaction:
    // the pages after it find it cancelled already.
    assert!(report.matched >= 250, "{report:?}");
    assert_eq!(report.done + report.skipped, report.matched, "{report:?}");
    let b = env.client.batch(&created.batch_id).await.unwrap();
    assert_eq!(
        (b.state, b.cancelled, b.pending, b.completions),
        ("completed", 300, 0, 1)
    );
    assert_eq!(batch_messages(&env, "bulk").await.len(), 1);
    assert_eq!(
        env.count("SELECT count(*) FROM inbox WHERE kind = 'cancelled'"),
        300,
        "one final message per run"
    );
}

/// A dependent that needs approval waits for both: approved before its parent ends it stays
/// blocked; its parent's end makes it due.
#[tokio::test]
async fn a_dependent_awaiting_approval_runs_once_approved_and_released() {
    let env = TestEnv::with_config(|c| c.approvals.require = vec!["echo".into()]);
    let parent = env
        .client
        .enqueue(EnqueueRequest::new("counter", json!({})))
        .await
        .unwrap()
        .run_id;
    let child = env
        .client
        .enqueue(echo("gated").after([parent.clone()]))
        .await
        .unwrap()
        .run_id;
    assert_eq!(
        env.client.get(&child).await.unwrap().state,
        RunState::AwaitingApproval
    );
    let run = env.client.approve(&child, "alice", None).await.unwrap();
    assert_eq!(run.state, RunState::Queued);
    assert_eq!(run.waiting.map(|w| w.kind), Some(WaitKind::Parents));
    env.drain().await;
    assert_eq!(
        env.client.get(&child).await.unwrap().state,
        RunState::Completed
    );
    // Approved after its parent ended: due at once.
    let late = env
        .client
        .enqueue(echo("late").after([parent.clone()]))
        .await
        .unwrap()
        .run_id;
    let run = env.client.approve(&late, "alice", None).await.unwrap();
    assert!(run.waiting.is_none(), "{run:?}");
    assert!(run.run_at <= env.client.now());
    env.drain().await;
    assert_eq!(
        env.client.get(&late).await.unwrap().state,
        RunState::Completed
    );
}
