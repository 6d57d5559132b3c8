//! Composition: a batch created with its runs in one transaction and completed by the end
//! of its last run (one message, the callback), dependencies resolved in the transaction of
//! each parent's end, children woken into their waiting parent, and the reads of links.

use toolq::ids::BatchId;
use toolq::run::{
    BatchFilter, Callback, DepMode, Linked, NewBatch, Suspension, WaitKind, steps::far_future,
};

use super::*;
use crate::support::TestEnv;

fn new_batch(env: &TestEnv, callback: bool) -> NewBatch {
    NewBatch {
        id: BatchId::generate(),
        session_id: "s".into(),
        title: "contract batch".into(),
        on_complete: callback.then(|| Callback {
            tool: TOOL.into(),
            args: json!({"message": "done"}),
            title: "on complete".into(),
            max_attempts: 1,
            priority: 0,
        }),
        created_at: now(env),
    }
}

fn messages_of_kind(msgs: &[Message], kind: &str) -> usize {
    msgs.iter().filter(|m| m.kind == kind).count()
}

async fn inbox(env: &TestEnv, session: &str) -> Vec<Message> {
    engine(env)
        .inbox_list(
            session.into(),
            InboxFilter {
                limit: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap()
}

/// Claims `id` (and whatever else is due) for a worker; the claimed run.
async fn claim_run(env: &TestEnv, id: &RunId) -> Run {
    let runs = claim(env, "wk_a", 100).await;
    runs.into_iter()
        .find(|r| &r.id == id)
        .expect("the run was claimed")
}

#[tokio::test]
async fn batch_insert_is_all_or_none_and_the_last_end_completes_the_batch_once() {
    let env = TestEnv::new();
    let b = new_batch(&env, true);
    let id = b.id.clone();
    // A bad run (a parent that does not exist) rolls the whole batch back.
    let mut bad = new_run(&env, "s");
    bad.after = vec!["bg_0123456789abcdef0123456789abcdef".parse().unwrap()];
    let e = engine(&env)
        .batch_insert(b.clone(), vec![new_run(&env, "s"), bad])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no such run"), "{e}");
    assert!(engine(&env).batch_get(id.clone()).await.unwrap().is_none());
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);

    let rows: Vec<NewRun> = (0..3).map(|_| new_run(&env, "s")).collect();
    let inserted = engine(&env).batch_insert(b, rows).await.unwrap();
    assert_eq!(inserted.len(), 3);
    let got = engine(&env).batch_get(id.clone()).await.unwrap().unwrap();
    assert_eq!((got.total, got.pending, got.state), (3, 3, "running"));
    assert_eq!(got.states.get("queued"), Some(&3));
    let runs = claim(&env, "wk_a", 3).await;
    assert_eq!(runs.len(), 3);
    for r in &runs {
        assert_eq!(r.batch_id.as_ref(), Some(&id));
    }
    // Two ends in one transaction, then the last one alone.
    end(
        &env,
        vec![
            lease_end(&runs[0], RunState::Completed),
            lease_end(&runs[1], RunState::Failed),
        ],
    )
    .await;
    let got = engine(&env).batch_get(id.clone()).await.unwrap().unwrap();
    assert_eq!((got.pending, got.completed, got.failed), (1, 1, 1));
    assert_eq!(
        messages_of_kind(&inbox(&env, "s").await, "batch_completed"),
        0
    );
    end(&env, vec![lease_end(&runs[2], RunState::Cancelled)]).await;
    let got = engine(&env).batch_get(id.clone()).await.unwrap().unwrap();
    assert_eq!(
        (got.state, got.pending, got.cancelled, got.completions),
        ("completed", 0, 1, 1)
    );
    assert_eq!(got.first_failures.len(), 2, "{:?}", got.first_failures);
    let msgs = inbox(&env, "s").await;
    assert_eq!(messages_of_kind(&msgs, "batch_completed"), 1);
    let cb: RunId = got.callback_run_id.clone().unwrap().parse().unwrap();
    let cb_run = get(&env, &cb).await;
    assert_eq!(cb_run.state, RunState::Queued);
    let parents = engine(&env)
        .run_linked_results(cb, Linked::Parents)
        .await
        .unwrap();
    assert_eq!(parents[0].id, id.as_str());
    assert_eq!(parents[0].result["failed"], json!(1));
    // A run cannot join a completed batch.
    let mut late = new_run(&env, "s");
    late.batch_id = Some(id.clone());
    let e = engine(&env).run_insert(vec![late]).await.unwrap_err();
    assert!(e.to_string().contains("has completed"), "{e}");
}

#[tokio::test]
async fn batch_list_reads_newest_first_with_filters() {
    let env = TestEnv::new();
    let a = new_batch(&env, false);
    let mut b = new_batch(&env, false);
    b.session_id = "other".into();
    engine(&env)
        .batch_insert(a.clone(), vec![new_run(&env, "s")])
        .await
        .unwrap();
    engine(&env)
        .batch_insert(b.clone(), vec![new_run(&env, "s")])
        .await
        .unwrap();
    let all = engine(&env)
        .batch_list(BatchFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let ids: Vec<&BatchId> = all.iter().map(|x| &x.id).collect();
    assert_eq!(ids, [&b.id, &a.id]);
    let mine = engine(&env)
        .batch_list(BatchFilter {
            session: Some("s".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(mine.len(), 1);
    let page = engine(&env)
        .batch_list(BatchFilter {
            before: Some(b.id.clone()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].id, a.id);
    let done = engine(&env)
        .batch_list(BatchFilter {
            state: Some("completed".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(done.is_empty());
}

#[tokio::test]
async fn run_insert_after_blocks_until_the_parent_completes_in_its_end_transaction() {
    let env = TestEnv::new();
    let parent = queued(&env, "s").await;
    let mut child = new_run(&env, "s");
    child.after = vec![parent.clone()];
    let child_id = insert(&env, child).await;
    let c = get(&env, &child_id).await;
    assert_eq!(c.state, RunState::Queued);
    assert_eq!(c.deps_pending, 1);
    assert_eq!(c.waiting.as_ref().map(|w| w.kind), Some(WaitKind::Parents));
    assert_eq!(c.run_at, far_future());
    // The claim takes the parent only.
    let p = claim_run(&env, &parent).await;
    assert_eq!(get(&env, &child_id).await.state, RunState::Queued);
    end(&env, vec![lease_end(&p, RunState::Completed)]).await;
    let c = get(&env, &child_id).await;
    assert_eq!((c.deps_pending, c.waiting.is_none()), (0, true));
    assert_eq!(c.run_at, now(&env));
    let links = engine(&env).run_links(child_id.clone()).await.unwrap();
    assert_eq!(links.parents.len(), 1);
    assert_eq!(links.parents[0].mode, DepMode::All);
    assert_eq!(links.parents[0].resolved.as_deref(), Some("completed"));
    let results = engine(&env)
        .run_linked_results(child_id.clone(), Linked::Parents)
        .await
        .unwrap();
    assert_eq!(results[0].result, json!({"ok": true}));
    claim_run(&env, &child_id).await;
}

#[tokio::test]
async fn run_end_of_a_failed_parent_cancels_its_dependents_with_one_message_each() {
    let env = TestEnv::new();
    let parent = queued(&env, "s").await;
    let mut child = new_run(&env, "s");
    child.after = vec![parent.clone()];
    let child_id = insert(&env, child).await;
    let mut grandchild = new_run(&env, "s");
    grandchild.after = vec![child_id.clone()];
    let grandchild_id = insert(&env, grandchild).await;
    let p = claim_run(&env, &parent).await;
    end(&env, vec![lease_end(&p, RunState::Failed)]).await;
    for id in [&child_id, &grandchild_id] {
        let r = get(&env, id).await;
        assert_eq!(r.state, RunState::Cancelled, "{r:?}");
        assert!(r.finished_at.is_some());
        assert!(r.waiting.is_none());
    }
    let msgs = inbox(&env, "s").await;
    for id in [&child_id, &grandchild_id] {
        let n = msgs
            .iter()
            .filter(|m| m.run_id.as_deref() == Some(id.as_str()))
            .count();
        assert_eq!(n, 1, "{id}");
    }
}

#[tokio::test]
async fn run_links_and_run_linked_results_read_a_spawning_run_and_its_children() {
    let env = TestEnv::new();
    let parent = running(&env, "s", "wk_a").await;
    let mut kids = Vec::new();
    for _ in 0..2 {
        let mut c = new_run(&env, "s");
        c.parent_run_id = Some(parent.id.clone());
        kids.push(insert(&env, c).await);
    }
    // The parent suspends to wait for its children: not due while one is unfinished.
    let mut wait = lease_end(&parent, RunState::Completed);
    wait.outcome = Outcome::Suspend(Suspension {
        kind: WaitKind::Children,
        event: None,
        until: far_future(),
    });
    wait.message = None;
    wait.result = None;
    wait.log = None;
    wait.error = None;
    end(&env, vec![wait]).await;
    let p = get(&env, &parent.id).await;
    assert_eq!(p.waiting.as_ref().map(|w| w.kind), Some(WaitKind::Children));
    assert_eq!(p.run_at, far_future());
    let links = engine(&env).run_links(parent.id.clone()).await.unwrap();
    assert_eq!(links.children.len(), 2);
    let claimed = claim(&env, "wk_b", 10).await;
    assert_eq!(claimed.len(), 2, "the children only");
    end(&env, vec![lease_end(&claimed[0], RunState::Completed)]).await;
    assert_eq!(get(&env, &parent.id).await.run_at, far_future());
    end(&env, vec![lease_end(&claimed[1], RunState::Failed)]).await;
    let p = get(&env, &parent.id).await;
    assert_eq!(p.run_at, now(&env), "due once its last child ended");
    let results = engine(&env)
        .run_linked_results(parent.id.clone(), Linked::Children)
        .await
        .unwrap();
    let states: Vec<&str> = results.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states.len(), 2);
    assert!(states.contains(&"completed") && states.contains(&"failed"));
    let child_links = engine(&env).run_links(kids[0].clone()).await.unwrap();
    assert_eq!(
        child_links.parent_run_id.as_deref(),
        Some(parent.id.as_str())
    );
}

#[tokio::test]
async fn prune_batch_removes_a_completed_batch_once_its_runs_are_gone() {
    let env = TestEnv::new();
    let done = new_batch(&env, false);
    let open = new_batch(&env, false);
    engine(&env)
        .batch_insert(done.clone(), vec![new_run(&env, "s")])
        .await
        .unwrap();
    engine(&env)
        .batch_insert(open.clone(), vec![new_run(&env, "s")])
        .await
        .unwrap();
    let runs = claim(&env, "wk_a", 1).await;
    end(&env, vec![lease_end(&runs[0], RunState::Completed)]).await;
    let finished = runs[0].batch_id.clone().unwrap();
    env.clock.advance(secs(3600));
    let removed = super::observe::prune(&env, &super::observe::cutoffs(now(&env))).await;
    // The finished run goes first, then its batch; the other batch's run is still queued.
    assert_eq!(removed.runs, 1);
    assert_eq!(removed.batches, 1);
    assert!(engine(&env).batch_get(finished).await.unwrap().is_none());
    let other = if runs[0].batch_id.as_ref() == Some(&done.id) {
        open.id
    } else {
        done.id
    };
    assert!(engine(&env).batch_get(other).await.unwrap().is_some());
}
