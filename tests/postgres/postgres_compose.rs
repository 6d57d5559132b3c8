//! Composition on Postgres under concurrency (issue 36): two stores on one database (two
//! hosts, each with its own pool) end runs at the same moment, and what one end decides from
//! another's rows still comes out right every time: a batch's last two ends send exactly one
//! `batch_completed` message, a parent waiting for its two children is woken when both end
//! at once, and a dependent inserted while its parent ends is never left blocked.
//!
//! Each race runs with the ends' messages (the inbox lock then orders the two transactions)
//! and without (only the row locks of composition do). A retry of a dependent racing its
//! parent's end re-arms its edge from the parent's state as of after that end, or before it
//! (and the end then releases it): never a stale one. And composition takes its row locks
//! before the inbox lock: a child's end that wakes-checks its parent never deadlocks with the
//! parent's step save settled together with another run's end.

use std::sync::Arc;
use toolq::run::steps::far_future;

use toolq::run::{
    FinishRecord, ListFilter, NewBatch, NewRun, Outcome, RunFilter, StepEntry, StepKind, StepSave,
    StepStatus, Suspension, WaitKind,
};
use toolq::store::postgres::PgStore;
use toolq::store::{Engine, OpenMode, RunRetry, RunSelect, Settle, Settlement};
use toolq::{BatchId, Run, RunId, RunState};

use crate::engine_contract::{
    claim, claim_of, engine, get, insert, lease_end, new_run, now, running, waiting_end,
};
use crate::support::TestEnv;

/// Rounds of each race.
const ROUNDS: usize = 25;

/// A second store on the test's database: another host.
async fn other_host(env: &TestEnv) -> PgStore {
    let url = env.db.url.clone();
    tokio::task::spawn_blocking(move || PgStore::open(&url, OpenMode::Existing).unwrap())
        .await
        .unwrap()
}

/// The end of a running attempt, with or without its message (and blobs).
fn ended(run: &Run, state: RunState, with_message: bool) -> FinishRecord {
    let mut r = lease_end(run, state);
    if !with_message {
        r.message = None;
        r.log = None;
        r.result = None;
    }
    r
}

/// Two ends, each through its own host, started at the same moment.
async fn end_at_once(
    env: &TestEnv,
    other: &PgStore,
    a: FinishRecord,
    b: FinishRecord,
) -> (Vec<bool>, Vec<bool>) {
    let at = now(env);
    let (x, y) = tokio::join!(engine(env).run_end(vec![a], at), other.run_end(vec![b], at));
    (x.unwrap(), y.unwrap())
}

/// Neither host retried a transaction (after a deadlock): the two took their locks in the
/// same order.
fn no_deadlock(env: &TestEnv, other: &PgStore) {
    assert_eq!(
        (engine(env).busy_retries(), other.busy_retries()),
        (0, 0),
        "no transaction was retried after a deadlock"
    );
}

#[tokio::test]
async fn a_batch_whose_last_two_runs_end_at_once_on_two_hosts_completes_once() {
    let env = TestEnv::new();
    let other = other_host(&env).await;
    for round in 0..ROUNDS {
        let batch = BatchId::generate();
        let runs: Vec<NewRun> = (0..2)
            .map(|_| NewRun {
                batch_id: Some(batch.clone()),
                ..new_run(&env, "s")
            })
            .collect();
        engine(&env)
            .batch_insert(
                NewBatch {
                    id: batch.clone(),
                    session_id: "s".into(),
                    title: format!("round {round}"),
                    on_complete: None,
                    created_at: now(&env),
                },
                runs,
            )
            .await
            .unwrap();
        let claimed = claim(&env, "wk_a", 2).await;
        assert_eq!(claimed.len(), 2);
        let with_message = round % 2 == 0;
        let (x, y) = end_at_once(
            &env,
            &other,
            ended(&claimed[0], RunState::Completed, with_message),
            ended(&claimed[1], RunState::Failed, with_message),
        )
        .await;
        assert_eq!((x, y), (vec![true], vec![true]));
        let b = engine(&env)
            .batch_get(batch.clone())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (b.state, b.pending, b.completed, b.failed, b.completions),
            ("completed", 0, 1, 1, 1),
            "round {round}"
        );
        let sent = env.count(&format!(
            "SELECT count(*) FROM inbox WHERE kind = 'batch_completed' \
             AND data::jsonb->>'batch_id' = '{batch}'"
        ));
        assert_eq!(sent, 1, "round {round}: one message per completion");
    }
    no_deadlock(&env, &other);
}

#[tokio::test]
async fn a_parent_waiting_for_two_children_that_end_at_once_on_two_hosts_is_woken() {
    let env = TestEnv::new();
    let other = other_host(&env).await;
    for round in 0..ROUNDS {
        let parent = running(&env, "s", "wk_a").await;
        for _ in 0..2 {
            insert(
                &env,
                NewRun {
                    parent_run_id: Some(parent.id.clone()),
                    ..new_run(&env, "s")
                },
            )
            .await;
        }
        // The parent suspends to wait for them (both unfinished: it stays asleep).
        let mut wait = ended(&parent, RunState::Completed, false);
        wait.error = None;
        wait.outcome = Outcome::Suspend(Suspension {
            kind: WaitKind::Children,
            event: None,
            until: far_future(),
        });
        assert_eq!(
            engine(&env).run_end(vec![wait], now(&env)).await.unwrap(),
            [true]
        );
        assert_eq!(get(&env, &parent.id).await.run_at, far_future());
        let children = claim(&env, "wk_a", 2).await;
        assert_eq!(children.len(), 2, "round {round}");
        let with_message = round % 2 == 0;
        end_at_once(
            &env,
            &other,
            ended(&children[0], RunState::Completed, with_message),
            ended(&children[1], RunState::Completed, with_message),
        )
        .await;
        let p = get(&env, &parent.id).await;
        assert_eq!(p.state, RunState::Queued);
        assert_eq!(
            p.run_at,
            now(&env),
            "round {round}: the parent is due once both children ended"
        );
        // Out of the way of the next round's claims.
        let back = claim(&env, "wk_a", 1).await;
        assert_eq!(back.iter().map(|r| &r.id).collect::<Vec<_>>(), [&parent.id]);
        engine(&env)
            .run_end(vec![ended(&back[0], RunState::Completed, false)], now(&env))
            .await
            .unwrap();
    }
    no_deadlock(&env, &other);
}

#[tokio::test]
async fn a_dependent_inserted_while_its_parent_ends_on_another_host_is_never_left_blocked() {
    let env = TestEnv::new();
    let other = other_host(&env).await;
    for round in 0..ROUNDS * 2 {
        let parent = running(&env, "s", "wk_a").await;
        let child = NewRun {
            after: vec![parent.id.clone()],
            ..new_run(&env, "s")
        };
        let child_id: RunId = child.id.clone();
        let fails = round % 4 >= 2;
        let state = if fails {
            RunState::Failed
        } else {
            RunState::Completed
        };
        let end = ended(&parent, state, round % 2 == 0);
        let at = now(&env);
        let (inserted, applied) = tokio::join!(
            engine(&env).run_insert(vec![child]),
            other.run_end(vec![end], at)
        );
        inserted.unwrap();
        assert_eq!(applied.unwrap(), [true]);
        let c = get(&env, &child_id).await;
        if fails {
            assert_eq!(c.state, RunState::Cancelled, "round {round}");
        } else {
            assert_eq!(
                (c.state, c.deps_pending, c.waiting.is_none(), c.run_at),
                (RunState::Queued, 0, true, at),
                "round {round}: due once its parent completed"
            );
            let links = engine(&env).run_links(child_id.clone()).await.unwrap();
            assert_eq!(
                links.parents[0].resolved.as_deref(),
                Some("completed"),
                "round {round}"
            );
            // Out of the way of the next round's claims.
            let taken = claim(&env, "wk_a", 1).await;
            assert_eq!(taken.iter().map(|r| &r.id).collect::<Vec<_>>(), [&child_id]);
            engine(&env)
                .run_end(vec![ended(&taken[0], RunState::Completed, false)], at)
                .await
                .unwrap();
        }
    }
    no_deadlock(&env, &other);
}

#[tokio::test]
async fn a_childs_end_on_one_host_and_its_parents_step_save_on_another_never_deadlock() {
    let env = TestEnv::new();
    let other = other_host(&env).await;
    for round in 0..ROUNDS {
        let parent = running(&env, "s", "wk_a").await;
        let child = NewRun {
            parent_run_id: Some(parent.id.clone()),
            ..new_run(&env, "s")
        };
        let child_id = insert(&env, child).await;
        insert(&env, new_run(&env, "s")).await;
        let both = claim(&env, "wk_b", 2).await;
        assert_eq!(both.len(), 2, "round {round}");
        let (kid, plain): (&Run, &Run) = if both[0].id == child_id {
            (&both[0], &both[1])
        } else {
            (&both[1], &both[0])
        };
        // One host settles the parent's step (its row locked first) with another run's end
        // (the inbox lock next); the other ends the child (whose end looks at the parent).
        let save = Settlement::Step(Box::new(StepSave {
            id: parent.id.clone(),
            attempt: parent.attempt,
            token: parent.lease_token.clone().unwrap(),
            entries: vec![StepEntry {
                seq: 1,
                name: "step".into(),
                kind: StepKind::Step,
                status: StepStatus::Done,
                output: Some("1".into()),
                error: None,
                wake_at: None,
                consumes: None,
            }],
        }));
        let settle = Settle {
            batch: Arc::new(vec![
                save,
                Settlement::End(Box::new(ended(plain, RunState::Completed, true))),
            ]),
            claim: claim_of(&env, "wk_a", 0),
        };
        let at = now(&env);
        let (settled, applied) = tokio::join!(
            engine(&env).attempt_settle(settle),
            other.run_end(vec![ended(kid, RunState::Completed, true)], at)
        );
        assert_eq!(settled.unwrap().applied, [true, true], "round {round}");
        assert_eq!(applied.unwrap(), [true], "round {round}");
        engine(&env)
            .run_end(vec![ended(&parent, RunState::Completed, false)], at)
            .await
            .unwrap();
    }
    no_deadlock(&env, &other);
}

#[tokio::test]
async fn runs_are_listed_selected_and_counted_by_batch_and_by_spawning_run() {
    let env = TestEnv::new();
    let batch = BatchId::generate();
    let spawner = insert(&env, new_run(&env, "s")).await;
    let spawned = NewRun {
        parent_run_id: Some(spawner.clone()),
        ..new_run(&env, "s")
    };
    let members = vec![spawned.clone(), new_run(&env, "s")];
    let inserted = engine(&env)
        .batch_insert(
            NewBatch {
                id: batch.clone(),
                session_id: "s".into(),
                title: "listed".into(),
                on_complete: None,
                created_at: now(&env),
            },
            members,
        )
        .await
        .unwrap();
    insert(&env, new_run(&env, "s")).await;
    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let mut newest_first: Vec<RunId> = inserted.iter().map(|i| i.id().clone()).collect();
    newest_first.sort();
    newest_first.reverse();
    let of_batch = engine(&env)
        .run_list(ListFilter {
            batch_id: Some(batch.to_string()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(of_batch), newest_first);
    let of_spawner = engine(&env)
        .run_list(ListFilter {
            parent_run_id: Some(spawner.to_string()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(of_spawner), std::slice::from_ref(&spawned.id));
    let both = engine(&env)
        .run_list(ListFilter {
            batch_id: Some(batch.to_string()),
            parent_run_id: Some(spawner.to_string()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(both), std::slice::from_ref(&spawned.id));
    let all = engine(&env)
        .run_list(ListFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 4);
    let filter = RunFilter {
        batch_id: Some(batch.to_string()),
        ..Default::default()
    };
    assert_eq!(
        engine(&env).run_count_where(filter.clone()).await.unwrap(),
        2
    );
    let page = engine(&env)
        .run_select(RunSelect {
            filter,
            after: String::new(),
            limit: 10,
        })
        .await
        .unwrap();
    newest_first.reverse();
    assert_eq!(ids(page), newest_first);
}

#[tokio::test]
async fn a_dependent_retried_while_its_parent_ends_on_another_host_is_never_left_blocked() {
    let env = TestEnv::new();
    let other = other_host(&env).await;
    for round in 0..ROUNDS {
        // `after_any` on a parent still running: the child waits for it whatever its outcome.
        let parent = running(&env, "s", "wk_a").await;
        let child = insert(
            &env,
            NewRun {
                after: vec![parent.id.clone()],
                after_mode: toolq::run::DepMode::Any,
                ..new_run(&env, "s")
            },
        )
        .await;
        let blocked = get(&env, &child).await;
        assert_eq!(blocked.deps_pending, 1);
        // Cancelled by hand while blocked, then retried as its parent ends.
        engine(&env)
            .run_end(vec![waiting_end(&blocked, RunState::Cancelled)], now(&env))
            .await
            .unwrap();
        let at = now(&env);
        let retry = RunRetry {
            id: child.clone(),
            expected: RunState::Cancelled,
            now: at,
            approval: None,
        };
        let end = ended(&parent, RunState::Failed, round % 2 == 0);
        let (retried, applied) =
            tokio::join!(engine(&env).run_retry(retry), other.run_end(vec![end], at));
        assert!(retried.unwrap(), "round {round}");
        assert_eq!(applied.unwrap(), [true]);
        let c = get(&env, &child).await;
        assert_eq!(
            (c.state, c.deps_pending, c.waiting.is_none(), c.run_at),
            (RunState::Queued, 0, true, at),
            "round {round}: due once its parent ended"
        );
        let taken = claim(&env, "wk_a", 1).await;
        assert_eq!(taken.iter().map(|r| &r.id).collect::<Vec<_>>(), [&child]);
        engine(&env)
            .run_end(vec![ended(&taken[0], RunState::Completed, false)], at)
            .await
            .unwrap();
    }
    no_deadlock(&env, &other);
}
