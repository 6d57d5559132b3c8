//! Runs: insert, read, cancel, retry, bulk pages and batches, approval, the end-writer and the
//! claim loop's reads.

use serde_json::json;
use toolq::error::StoreError;
use toolq::run::UniqueCheck;
use toolq::run::{Inserted, ListFilter, Outcome, PendingApproval};
use toolq::store::{
    LimitedInsert, RunApprove, RunCancelMany, RunInsertLimited, RunPage, RunRetry, RunRetryMany,
    RunSelect,
};
use toolq::{RunFilter, RunState};

use super::*;
use crate::support::TestEnv;

fn approval(run: &NewRun, deadline: Option<DateTime<Utc>>) -> PendingApproval {
    let message = NewMessage {
        session_id: run.session_id.clone(),
        run_id: run.id.to_string(),
        attempt: 0,
        kind: "approval_request",
        body: "approve?".into(),
        data: json!({}),
        delivery: Delivery::WhenIdle,
    };
    PendingApproval {
        deadline,
        message,
        message_data: "{}".into(),
    }
}

/// An awaiting run of `session` with `deadline`.
async fn awaiting(env: &TestEnv, session: &str, deadline: Option<DateTime<Utc>>) -> RunId {
    let mut run = new_run(env, session);
    run.approval = Some(approval(&run, deadline));
    insert(env, run).await
}

/// A run of `session` that ran once and failed (max_attempts as given).
async fn failed(env: &TestEnv, session: &str, max_attempts: i64) -> Run {
    let mut run = new_run(env, session);
    run.max_attempts = max_attempts;
    let id = insert(env, run).await;
    let claimed = claim(env, "wk_a", 1).await;
    assert_eq!(claimed[0].id, id);
    assert_eq!(
        end(env, vec![lease_end(&claimed[0], RunState::Failed)]).await,
        [true]
    );
    get(env, &id).await
}

fn all(env: &TestEnv) -> ListFilter {
    let _ = env;
    ListFilter {
        limit: 100,
        ..Default::default()
    }
}

#[tokio::test]
async fn run_insert_is_all_or_none_and_a_known_key_returns_its_run() {
    let env = TestEnv::new();
    let mut first = new_run(&env, "s1");
    first.idempotency_key = Some("k1".into());
    let id = first.id.clone();
    assert_eq!(
        engine(&env).run_insert(vec![first.clone()]).await.unwrap(),
        [Inserted::New(id.clone())]
    );
    // The same key again, same tool and args: the existing run, nothing written.
    let mut again = new_run(&env, "s1");
    again.idempotency_key = Some("k1".into());
    assert_eq!(
        engine(&env).run_insert(vec![again]).await.unwrap(),
        [Inserted::Existing(id.clone())]
    );
    // The key with other args fails the whole insert: the fresh run in it is not written.
    let fresh = new_run(&env, "s1");
    let fresh_id = fresh.id.clone();
    let mut conflict = new_run(&env, "s1");
    conflict.idempotency_key = Some("k1".into());
    conflict.args = r#"{"message":"other"}"#.into();
    let err = engine(&env)
        .run_insert(vec![fresh, conflict])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::KeyConflict { index: 1, .. }),
        "{err:?}"
    );
    assert!(engine(&env).run_get(fresh_id).await.unwrap().is_none());
    let listed = engine(&env).run_list(all(&env)).await.unwrap();
    assert_eq!(listed.iter().map(|r| &r.id).collect::<Vec<_>>(), [&id]);
    assert_eq!(listed[0].state, RunState::Queued);
}

#[tokio::test]
async fn run_insert_with_approval_stores_it_awaiting_with_its_request() {
    let env = TestEnv::new();
    let deadline = now(&env) + secs(3600);
    let id = awaiting(&env, "s1", Some(deadline)).await;
    let run = get(&env, &id).await;
    assert_eq!(run.state, RunState::AwaitingApproval);
    assert_eq!(run.approval_state.as_deref(), Some("pending"));
    assert_eq!(run.approval_deadline, Some(deadline));
    let about = engine(&env).inbox_of_run(id, 10).await.unwrap();
    assert_eq!(
        about.iter().map(|m| m.kind.as_str()).collect::<Vec<_>>(),
        ["approval_request"]
    );
    // Not an end: nothing claims it.
    assert!(claim(&env, "wk_a", 5).await.is_empty());
}

#[tokio::test]
async fn run_insert_with_unique_returns_the_matching_run() {
    let env = TestEnv::new();
    let unique = || UniqueCheck {
        key: "u1".into(),
        states: vec![RunState::Queued, RunState::Running],
        since: None,
    };
    let (mut a, mut b) = (new_run(&env, "s1"), new_run(&env, "s1"));
    a.unique = Some(unique());
    b.unique = Some(unique());
    let a_id = a.id.clone();
    // Checked against runs earlier in the same insert too.
    let got = engine(&env).run_insert(vec![a, b]).await.unwrap();
    assert_eq!(
        got,
        [
            Inserted::New(a_id.clone()),
            Inserted::Existing(a_id.clone())
        ]
    );
    let mut c = new_run(&env, "s1");
    c.unique = Some(unique());
    assert_eq!(
        engine(&env).run_insert(vec![c]).await.unwrap(),
        [Inserted::Existing(a_id.clone())]
    );
    // Once it is no longer in a matching state, a new run is made.
    let run = get(&env, &a_id).await;
    end(&env, vec![waiting_end(&run, RunState::Cancelled)]).await;
    let mut d = new_run(&env, "s1");
    d.unique = Some(unique());
    let d_id = d.id.clone();
    assert_eq!(
        engine(&env).run_insert(vec![d]).await.unwrap(),
        [Inserted::New(d_id)]
    );
}

#[tokio::test]
async fn run_insert_within_limit_counts_active_background_runs() {
    let env = TestEnv::new();
    let limited = |run: NewRun, except: Option<String>| RunInsertLimited {
        run,
        except,
        limit: Some(1),
        now: now(&env),
        approval: None,
    };
    let first = new_run(&env, "s1");
    let first_id = first.id.clone();
    let got = engine(&env)
        .run_insert_within_limit(limited(first, None))
        .await
        .unwrap();
    assert!(
        matches!(got, LimitedInsert::Inserted(Inserted::New(ref id)) if *id == first_id),
        "{got:?}"
    );
    assert!(get(&env, &first_id).await.background);
    // With a host's approval, the run is recorded approved before it is queued.
    let mut asked = new_run(&env, "s3");
    asked.approval = Some(approval(&asked, None));
    let asked_id = asked.id.clone();
    let p = RunInsertLimited {
        approval: Some(RunApprove {
            id: asked_id.clone(),
            by: "host".into(),
            note: None,
            now: now(&env),
        }),
        ..limited(asked, None)
    };
    engine(&env).run_insert_within_limit(p).await.unwrap();
    let asked = get(&env, &asked_id).await;
    assert_eq!(
        (asked.state, asked.approval_by.as_deref()),
        (RunState::Queued, Some("host"))
    );
    // The session's one slot is taken ...
    let second = new_run(&env, "s1");
    let second_id = second.id.clone();
    let got = engine(&env)
        .run_insert_within_limit(limited(second.clone(), None))
        .await
        .unwrap();
    assert!(matches!(got, LimitedInsert::OverSession(1)), "{got:?}");
    assert!(
        engine(&env)
            .run_get(second_id.clone())
            .await
            .unwrap()
            .is_none()
    );
    // ... unless the caller's own run is the one not to count; other sessions have their own.
    let got = engine(&env)
        .run_insert_within_limit(limited(second, Some(first_id.to_string())))
        .await
        .unwrap();
    assert!(
        matches!(got, LimitedInsert::Inserted(Inserted::New(_))),
        "{got:?}"
    );
    let other = engine(&env)
        .run_insert_within_limit(limited(new_run(&env, "s2"), None))
        .await
        .unwrap();
    assert!(
        matches!(other, LimitedInsert::Inserted(Inserted::New(_))),
        "{other:?}"
    );
    // The limit holds when inserts race (on Postgres, several connections).
    let env = TestEnv::new();
    let race = |run: NewRun| RunInsertLimited {
        run,
        except: None,
        limit: Some(2),
        now: now(&env),
        approval: None,
    };
    let (a, b, c, d) = tokio::join!(
        engine(&env).run_insert_within_limit(race(new_run(&env, "s1"))),
        engine(&env).run_insert_within_limit(race(new_run(&env, "s1"))),
        engine(&env).run_insert_within_limit(race(new_run(&env, "s1"))),
        engine(&env).run_insert_within_limit(race(new_run(&env, "s1"))),
    );
    let inserted = [a, b, c, d]
        .into_iter()
        .filter(|got| matches!(got.as_ref().unwrap(), LimitedInsert::Inserted(_)))
        .count();
    assert_eq!(inserted, 2);
    assert_eq!(engine(&env).run_count_unfinished().await.unwrap(), 2);
    // A delayed run does not count as active.
    let env = TestEnv::new();
    let mut later = new_run(&env, "s1");
    later.run_at = now(&env) + secs(600);
    engine(&env)
        .run_insert_within_limit(limited(later, None))
        .await
        .unwrap();
    let got = engine(&env)
        .run_insert_within_limit(limited(new_run(&env, "s1"), None))
        .await
        .unwrap();
    assert!(
        matches!(got, LimitedInsert::Inserted(Inserted::New(_))),
        "{got:?}"
    );
}

#[tokio::test]
async fn run_insert_preapproved_queues_it_approved() {
    let env = TestEnv::new();
    let mut run = new_run(&env, "s1");
    run.approval = Some(approval(&run, None));
    let id = run.id.clone();
    let approve = RunApprove {
        id: id.clone(),
        by: "host".into(),
        note: Some("called by the host".into()),
        now: now(&env),
    };
    engine(&env)
        .run_insert_preapproved(run, Some(approve))
        .await
        .unwrap();
    let run = get(&env, &id).await;
    assert_eq!(run.state, RunState::Queued);
    assert_eq!(run.approval_state.as_deref(), Some("approved"));
    assert_eq!(run.approval_by.as_deref(), Some("host"));
    // The worker never asks again: no request message, and it is claimable.
    assert!(
        engine(&env)
            .inbox_of_run(id.clone(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(claim(&env, "wk_a", 5).await.len(), 1);
}

#[tokio::test]
async fn run_get_and_run_list_read_newest_first_with_filters() {
    let env = TestEnv::new();
    assert!(
        engine(&env)
            .run_get(RunId::generate())
            .await
            .unwrap()
            .is_none()
    );
    let a = queued(&env, "s1").await;
    env.clock.advance(secs(1));
    let b = queued(&env, "s2").await;
    env.clock.advance(secs(1));
    let c = cancelled(&env, "s1").await;
    let run = get(&env, &a).await;
    assert_eq!(
        (run.session_id.as_str(), run.tool.as_str(), run.state),
        ("s1", TOOL, RunState::Queued)
    );
    assert_eq!(run.args, json!({"message": "hi"}));
    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let list = |f: ListFilter| async { ids(engine(&env).run_list(f).await.unwrap()) };
    assert_eq!(list(all(&env)).await, [c.clone(), b.clone(), a.clone()]);
    let s1 = ListFilter {
        session: Some("s1".into()),
        ..all(&env)
    };
    assert_eq!(list(s1).await, [c.clone(), a.clone()]);
    let queued_only = ListFilter {
        state: Some(RunState::Queued),
        ..all(&env)
    };
    assert_eq!(list(queued_only).await, [b.clone(), a.clone()]);
    let other_tool = ListFilter {
        tool: Some("sleep".into()),
        ..all(&env)
    };
    assert!(list(other_tool).await.is_empty());
    assert_eq!(
        list(ListFilter {
            limit: 1,
            ..all(&env)
        })
        .await,
        [c]
    );
}

#[tokio::test]
async fn run_cancel_request_sets_the_time_once_and_only_on_a_running_run() {
    let env = TestEnv::new();
    let run = running(&env, "s2", "wk_a").await;
    let waiting = queued(&env, "s1").await;
    assert!(
        !engine(&env)
            .run_cancel_request(waiting.clone(), now(&env))
            .await
            .unwrap()
    );
    assert_eq!(get(&env, &waiting).await.cancel_requested_at, None);
    let first = now(&env);
    assert!(
        engine(&env)
            .run_cancel_request(run.id.clone(), first)
            .await
            .unwrap()
    );
    env.clock.advance(secs(5));
    engine(&env)
        .run_cancel_request(run.id.clone(), now(&env))
        .await
        .unwrap();
    assert_eq!(get(&env, &run.id).await.cancel_requested_at, Some(first));
}

#[tokio::test]
async fn run_retry_only_from_the_expected_final_state() {
    let env = TestEnv::new();
    let run = failed(&env, "s1", 1).await;
    assert_eq!((run.state, run.attempt), (RunState::Failed, 1));
    env.clock.advance(secs(60));
    let retry = |expected| RunRetry {
        id: run.id.clone(),
        expected,
        now: now(&env),
        approval: None,
    };
    assert!(
        !engine(&env)
            .run_retry(retry(RunState::Cancelled))
            .await
            .unwrap()
    );
    assert_eq!(get(&env, &run.id).await.state, RunState::Failed);
    assert!(
        engine(&env)
            .run_retry(retry(RunState::Failed))
            .await
            .unwrap()
    );
    let again = get(&env, &run.id).await;
    assert_eq!(again.state, RunState::Queued);
    assert_eq!(again.run_at, now(&env));
    assert_eq!((again.finished_at, again.error.as_deref()), (None, None));
    assert!(
        again.max_attempts > again.attempt,
        "{} attempts of {}",
        again.attempt,
        again.max_attempts
    );
    // It is queued now, no longer failed: a second retry does not apply.
    assert!(
        !engine(&env)
            .run_retry(retry(RunState::Failed))
            .await
            .unwrap()
    );
    // With approval, it goes back to awaiting with its request.
    let env = TestEnv::new();
    let run = failed(&env, "s1", 3).await;
    let mut pending = approval(&new_run(&env, "s1"), None);
    pending.message.run_id = run.id.to_string();
    let p = RunRetry {
        id: run.id.clone(),
        expected: RunState::Failed,
        now: now(&env),
        approval: Some(pending),
    };
    assert!(engine(&env).run_retry(p).await.unwrap());
    assert_eq!(get(&env, &run.id).await.state, RunState::AwaitingApproval);
}

#[tokio::test]
async fn run_select_pages_in_id_order_after_a_key() {
    let env = TestEnv::new();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(queued(&env, "s1").await);
    }
    let gone = cancelled(&env, "s1").await;
    let select = |after: String, states: Vec<RunState>| RunSelect {
        filter: RunFilter {
            states,
            ..Default::default()
        },
        after,
        limit: 2,
    };
    let page = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let first = page(
        engine(&env)
            .run_select(select(String::new(), vec![RunState::Queued]))
            .await
            .unwrap(),
    );
    assert_eq!(first, ids[..2]);
    let next = page(
        engine(&env)
            .run_select(select(first[1].to_string(), vec![RunState::Queued]))
            .await
            .unwrap(),
    );
    assert_eq!(next, ids[2..]);
    let last = page(
        engine(&env)
            .run_select(select(next[1].to_string(), vec![RunState::Queued]))
            .await
            .unwrap(),
    );
    assert!(last.is_empty());
    let cancelled = page(
        engine(&env)
            .run_select(select(String::new(), vec![RunState::Cancelled]))
            .await
            .unwrap(),
    );
    assert_eq!(cancelled, [gone]);
}

#[tokio::test]
async fn run_count_where_counts_the_matches() {
    let env = TestEnv::new();
    for _ in 0..3 {
        queued(&env, "s1").await;
    }
    queued(&env, "s2").await;
    cancelled(&env, "s1").await;
    let count = |filter| async { engine(&env).run_count_where(filter).await.unwrap() };
    assert_eq!(count(RunFilter::default()).await, 5);
    assert_eq!(
        count(RunFilter {
            session: Some("s1".into()),
            ..Default::default()
        })
        .await,
        4
    );
    let queued_s1 = RunFilter {
        session: Some("s1".into()),
        states: vec![RunState::Queued],
        ..Default::default()
    };
    assert_eq!(count(queued_s1).await, 3);
}

#[tokio::test]
async fn run_page_pages_newest_first_before_a_key() {
    let env = TestEnv::new();
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(queued(&env, "s1").await);
        env.clock.advance(secs(1));
    }
    ids.reverse();
    let page = |before: Option<String>| RunPage {
        filter: RunFilter::default(),
        before,
        limit: 2,
    };
    let read = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let first = read(engine(&env).run_page(page(None)).await.unwrap());
    assert_eq!(first, ids[..2]);
    let second = read(
        engine(&env)
            .run_page(page(Some(first[1].to_string())))
            .await
            .unwrap(),
    );
    assert_eq!(second, ids[2..4]);
    let third = read(
        engine(&env)
            .run_page(page(Some(second[1].to_string())))
            .await
            .unwrap(),
    );
    assert_eq!(third, ids[4..]);
}

#[tokio::test]
async fn run_finished_buckets_counts_per_state_and_bucket() {
    let env = TestEnv::new();
    cancelled(&env, "s1").await; // before the window
    env.clock.advance(secs(60));
    let since = now(&env);
    let a = running(&env, "s1", "wk_a").await;
    end(&env, vec![lease_end(&a, RunState::Completed)]).await;
    env.clock.advance(secs(90));
    let b = running(&env, "s1", "wk_a").await;
    end(&env, vec![lease_end(&b, RunState::Failed)]).await;
    cancelled(&env, "s1").await;
    let mut got = engine(&env).run_finished_buckets(since, 60).await.unwrap();
    got.sort_by(|x, y| (x.bucket, &x.state).cmp(&(y.bucket, &y.state)));
    let got: Vec<(i64, &str, i64)> = got
        .iter()
        .map(|b| (b.bucket, b.state.as_str(), b.count))
        .collect();
    assert_eq!(
        got,
        [(0, "completed", 1), (1, "cancelled", 1), (1, "failed", 1)]
    );
}

#[tokio::test]
async fn run_cancel_many_ends_waiting_runs_and_asks_running_ones_to_stop() {
    let env = TestEnv::new();
    let busy = running(&env, "s1", "wk_a").await;
    let waiting = get(&env, &queued(&env, "s1").await).await;
    // Read queued, then cancelled by someone else: its end is stale.
    let gone = get(&env, &queued(&env, "s1").await).await;
    end(&env, vec![waiting_end(&gone, RunState::Cancelled)]).await;
    let p = RunCancelMany {
        ends: vec![
            waiting_end(&waiting, RunState::Cancelled),
            waiting_end(&gone, RunState::Cancelled),
        ],
        requests: vec![busy.id.clone(), waiting.id.clone()],
        now: now(&env),
    };
    let out = engine(&env).run_cancel_many(p).await.unwrap();
    // The stale end is fenced out; the queued run is not running, so no request.
    assert_eq!(
        (out.ended, out.requested),
        (vec![true, false], vec![true, false])
    );
    assert_eq!(get(&env, &waiting.id).await.state, RunState::Cancelled);
    assert_eq!(messages_of(&env, &waiting.id).await, 1);
    assert_eq!(messages_of(&env, &gone.id).await, 1);
    let busy = get(&env, &busy.id).await;
    assert_eq!(
        (busy.state, busy.cancel_requested_at),
        (RunState::Running, Some(now(&env)))
    );
}

#[tokio::test]
async fn run_retry_many_applies_only_to_runs_still_in_their_read_state() {
    let env = TestEnv::new();
    let a = failed(&env, "s1", 3).await;
    let b = failed(&env, "s1", 3).await;
    let p = RunRetryMany {
        runs: vec![
            (a.id.clone(), RunState::Failed),
            (b.id.clone(), RunState::Cancelled),
        ],
        now: now(&env),
        approvals: Vec::new(),
    };
    assert_eq!(engine(&env).run_retry_many(p).await.unwrap(), [true, false]);
    assert_eq!(get(&env, &a.id).await.state, RunState::Queued);
    assert_eq!(get(&env, &b.id).await.state, RunState::Failed);
}

#[tokio::test]
async fn run_approve_only_from_awaiting_and_keeps_a_delay() {
    let env = TestEnv::new();
    let mut run = new_run(&env, "s1");
    run.run_at = now(&env) + secs(600);
    run.approval = Some(approval(&run, None));
    let delayed = insert(&env, run).await;
    let approve = |id: &RunId| RunApprove {
        id: id.clone(),
        by: "ops".into(),
        note: Some("fine".into()),
        now: now(&env),
    };
    assert!(engine(&env).run_approve(approve(&delayed)).await.unwrap());
    let got = get(&env, &delayed).await;
    assert_eq!(got.state, RunState::Queued);
    assert_eq!(got.run_at, now(&env) + secs(600));
    assert_eq!(
        (got.approval_by.as_deref(), got.approval_note.as_deref()),
        (Some("ops"), Some("fine"))
    );
    assert_eq!(got.approval_at, Some(now(&env)));
    // Only from awaiting: not twice, not a queued run.
    assert!(!engine(&env).run_approve(approve(&delayed)).await.unwrap());
    let plain = queued(&env, "s1").await;
    assert!(!engine(&env).run_approve(approve(&plain)).await.unwrap());
    // A run due in the past is queued from now.
    let mut run = new_run(&env, "s1");
    run.run_at = now(&env) - secs(600);
    run.approval = Some(approval(&run, None));
    let past = insert(&env, run).await;
    assert!(engine(&env).run_approve(approve(&past)).await.unwrap());
    assert_eq!(get(&env, &past).await.run_at, now(&env));
}

#[tokio::test]
async fn run_list_overdue_approvals_oldest_deadline_first() {
    let env = TestEnv::new();
    let t0 = now(&env);
    let late = awaiting(&env, "s1", Some(t0 + secs(20))).await;
    let early = awaiting(&env, "s1", Some(t0 + secs(10))).await;
    let future = awaiting(&env, "s1", Some(t0 + secs(100))).await;
    let never = awaiting(&env, "s1", None).await;
    let at = t0 + secs(30);
    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let got = ids(engine(&env)
        .run_list_overdue_approvals(at, 10)
        .await
        .unwrap());
    assert_eq!(got, [early.clone(), late]);
    assert_eq!(
        ids(engine(&env)
            .run_list_overdue_approvals(at, 1)
            .await
            .unwrap()),
        [early]
    );
    let _ = (future, never);
    assert!(
        engine(&env)
            .run_list_overdue_approvals(t0, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// An empty log costs no row (issue 38): a final end whose log is empty writes none and
/// deletes the log an earlier attempt left; the client reads a finished run's missing log as
/// empty, and an unfinished run's as not written yet.
#[tokio::test]
async fn run_end_with_an_empty_log_writes_no_log_row() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    let mut retry = lease_end(&run, RunState::Failed);
    retry.outcome = Outcome::Retry(now(&env));
    retry.message = None;
    assert_eq!(end(&env, vec![retry]).await, [true]);
    let queued = get(&env, &run.id).await;
    let first = env
        .client
        .log(&queued)
        .await
        .unwrap()
        .expect("the first attempt's log");
    assert_eq!(first.content, b"the log");
    let again = claim(&env, "wk_a", 1).await;
    assert_eq!(again.len(), 1);
    let mut done = lease_end(&again[0], RunState::Completed);
    done.log = Some((Vec::new(), false));
    assert_eq!(end(&env, vec![done]).await, [true]);
    let finished = get(&env, &run.id).await;
    let blob = |path: String| async { engine(&env).blob_get("s1".into(), path).await.unwrap() };
    assert!(blob(finished.log_path()).await.is_none(), "no log row");
    assert!(blob(finished.result_path()).await.is_some(), "the result");
    let log = env
        .client
        .log(&finished)
        .await
        .unwrap()
        .expect("a finished run's log");
    assert_eq!((log.content.len(), log.size, log.truncated), (0, 0, false));
    assert_eq!(log.path, finished.log_path());
    let other = running(&env, "s1", "wk_a").await;
    assert!(
        env.client.log(&other).await.unwrap().is_none(),
        "not written yet"
    );
}

#[tokio::test]
async fn run_end_writes_state_blobs_and_one_message_once() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    env.clock.advance(secs(3));
    let record = lease_end(&run, RunState::Completed);
    assert_eq!(end(&env, vec![record.clone()]).await, [true]);
    let done = get(&env, &run.id).await;
    assert_eq!(
        (done.state, done.finished_at),
        (RunState::Completed, Some(now(&env)))
    );
    let blob = |path: String| async { engine(&env).blob_get("s1".into(), path).await.unwrap() };
    assert_eq!(
        blob(done.result_path()).await.expect("result blob").content,
        br#"{"ok":true}"#
    );
    assert_eq!(
        blob(done.log_path()).await.expect("log blob").content,
        b"the log"
    );
    let about = engine(&env).inbox_of_run(run.id.clone(), 10).await.unwrap();
    assert_eq!(
        about.iter().map(|m| m.kind.as_str()).collect::<Vec<_>>(),
        ["completed"]
    );
    // The same fence again does not apply: no second message, the state stays.
    env.clock.advance(secs(3));
    let mut again = record.clone();
    again.outcome = Outcome::Final(RunState::Failed);
    assert_eq!(end(&env, vec![again, record]).await, [false, false]);
    assert_eq!(messages_of(&env, &run.id).await, 1);
    let still = get(&env, &run.id).await;
    assert_eq!(
        (still.state, still.finished_at),
        (RunState::Completed, done.finished_at)
    );
    // A stale lease token does not apply.
    let other = running(&env, "s1", "wk_a").await;
    let mut stale = lease_end(&other, RunState::Completed);
    stale.fence = Fence::Lease("not-the-token".into());
    assert_eq!(end(&env, vec![stale]).await, [false]);
    assert_eq!(get(&env, &other.id).await.state, RunState::Running);
    assert_eq!(
        end(&env, vec![lease_end(&other, RunState::Completed)]).await,
        [true]
    );
    // A retry outcome re-queues it for later, without a final message.
    let third = running(&env, "s1", "wk_a").await;
    let mut retry = lease_end(&third, RunState::Failed);
    retry.outcome = Outcome::Retry(now(&env) + secs(30));
    retry.message = None;
    assert_eq!(end(&env, vec![retry]).await, [true]);
    let queued = get(&env, &third.id).await;
    assert_eq!(
        (queued.state, queued.run_at),
        (RunState::Queued, now(&env) + secs(30))
    );
    assert!(
        engine(&env)
            .inbox_of_run(third.id.clone(), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// "Per record all or nothing; returns which fences held": two records of one run in one
/// call are judged each by its own fence, so only the one holding the lease writes its state
/// and its message, and the call does not fail.
#[tokio::test]
async fn run_end_judges_each_record_by_its_own_fence() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    let mut stale = lease_end(&run, RunState::Failed);
    stale.fence = Fence::Lease("not-the-token".into());
    let fresh = lease_end(&run, RunState::Completed);
    let applied = engine(&env).run_end(vec![stale, fresh], now(&env)).await;
    assert_eq!(applied.unwrap(), [false, true]);
    assert_eq!(get(&env, &run.id).await.state, RunState::Completed);
    let about = engine(&env).inbox_of_run(run.id.clone(), 10).await.unwrap();
    assert_eq!(
        about.iter().map(|m| m.kind.as_str()).collect::<Vec<_>>(),
        ["completed"]
    );
}

#[tokio::test]
async fn run_pending_counts_due_runs_and_queued_retries_of_the_tools() {
    let env = TestEnv::new();
    let tools = || -> std::sync::Arc<[String]> { vec![TOOL.to_string()].into() };
    let others = || -> std::sync::Arc<[String]> { vec!["sleep".to_string()].into() };
    assert!(!engine(&env).run_pending(now(&env), tools()).await.unwrap());
    // Running elsewhere does not count.
    let run = running(&env, "s1", "wk_a").await;
    assert!(!engine(&env).run_pending(now(&env), tools()).await.unwrap());
    // A queued retry counts, due or not; not for other tools.
    let mut retry = lease_end(&run, RunState::Failed);
    retry.outcome = Outcome::Retry(now(&env) + secs(600));
    end(&env, vec![retry]).await;
    assert!(engine(&env).run_pending(now(&env), tools()).await.unwrap());
    assert!(!engine(&env).run_pending(now(&env), others()).await.unwrap());
    // A delayed first attempt does not count until due; a due one does.
    let env = TestEnv::new();
    let mut later = new_run(&env, "s1");
    later.run_at = now(&env) + secs(600);
    insert(&env, later).await;
    assert!(!engine(&env).run_pending(now(&env), tools()).await.unwrap());
    assert!(
        engine(&env)
            .run_pending(now(&env) + secs(600), tools())
            .await
            .unwrap()
    );
    queued(&env, "s1").await;
    assert!(engine(&env).run_pending(now(&env), tools()).await.unwrap());
    assert!(!engine(&env).run_pending(now(&env), others()).await.unwrap());
}

#[tokio::test]
async fn run_next_due_is_the_earliest_later_run_at_of_the_tools() {
    let env = TestEnv::new();
    let tools = || -> std::sync::Arc<[String]> { vec![TOOL.to_string()].into() };
    assert_eq!(
        engine(&env).run_next_due(now(&env), tools()).await.unwrap(),
        None
    );
    queued(&env, "s1").await; // due now: not after now
    for delay in [60, 30] {
        let mut run = new_run(&env, "s1");
        run.run_at = now(&env) + secs(delay);
        insert(&env, run).await;
    }
    let mut other = new_run(&env, "s1");
    other.tool = "sleep".into();
    other.run_at = now(&env) + secs(10);
    insert(&env, other).await;
    assert_eq!(
        engine(&env).run_next_due(now(&env), tools()).await.unwrap(),
        Some(now(&env) + secs(30))
    );
}

#[tokio::test]
async fn run_count_unfinished_counts_queued_awaiting_and_running() {
    let env = TestEnv::new();
    running(&env, "s1", "wk_a").await;
    queued(&env, "s1").await;
    awaiting(&env, "s1", None).await;
    cancelled(&env, "s1").await;
    assert_eq!(engine(&env).run_count_unfinished().await.unwrap(), 3);
}
