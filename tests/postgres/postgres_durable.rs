//! Durable runs on Postgres (issue 35), through `toolq::store::Engine`: step saves fenced by
//! the lease, the journal's order, event delivery and its wake-up, and suspensions through the
//! one end-writer (the wait's columns set, given back, and cleared by every other end).

use std::sync::Arc;

use serde_json::json;
use toolq::run::steps::far_future;
use toolq::run::{
    EventSent, FinishRecord, NewEvent, Outcome, StepEntry, StepKind, StepSave, StepStatus,
    Suspension, WaitKind, Waiting,
};
use toolq::store::{Release, Settle, Settlement};
use toolq::{Run, RunId, RunState};

use crate::engine_contract::{
    claim, claim_of, end, engine, get, lease_end, now, queued, running, secs, waiting_end,
};
use crate::support::TestEnv;

fn entry(seq: i64, name: &str, status: StepStatus) -> StepEntry {
    StepEntry {
        seq,
        name: name.into(),
        kind: StepKind::Step,
        status,
        output: (status == StepStatus::Done).then(|| json!({ "n": seq }).to_string()),
        error: (status == StepStatus::Failed).then(|| "boom".to_string()),
        wake_at: None,
        consumes: None,
    }
}

fn save(run: &Run, token: &str, entries: Vec<StepEntry>) -> Settlement {
    Settlement::Step(Box::new(StepSave {
        id: run.id.clone(),
        attempt: run.attempt,
        token: token.into(),
        entries,
    }))
}

/// Settles `batch` claiming nothing; per settlement, whether it applied.
async fn settle(env: &TestEnv, batch: Vec<Settlement>) -> Vec<bool> {
    engine(env)
        .attempt_settle(Settle {
            batch: Arc::new(batch),
            claim: claim_of(env, "wk_a", 0),
        })
        .await
        .unwrap()
        .applied
}

async fn send(env: &TestEnv, run: &RunId, name: &str, payload: serde_json::Value) -> EventSent {
    engine(env)
        .event_send(NewEvent {
            run: run.clone(),
            name: name.into(),
            payload: payload.to_string(),
            sent_by: Some("test".into()),
            now: now(env),
        })
        .await
        .unwrap()
}

/// The end of `run`'s attempt suspending it: no message, no blobs.
fn suspend(
    run: &Run,
    kind: WaitKind,
    event: Option<&str>,
    until: chrono::DateTime<chrono::Utc>,
) -> FinishRecord {
    let mut r = lease_end(run, RunState::Completed);
    r.outcome = Outcome::Suspend(Suspension {
        kind,
        event: event.map(str::to_string),
        until,
    });
    r.error = None;
    r.log = None;
    r.result = None;
    r.message = None;
    r
}

/// `wait_kind` and `wait_event` as stored (a run that is not queued reads no `waiting`).
fn wait_columns(env: &TestEnv, id: &RunId) -> Vec<Option<String>> {
    env.db
        .rows(&format!(
            "SELECT wait_kind, wait_event FROM runs WHERE id = '{id}'"
        ))
        .remove(0)
}

#[tokio::test]
async fn step_saves_are_fenced_by_the_lease_and_read_back_in_order() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    let token = run.lease_token.clone().unwrap();
    // A stale lease writes nothing.
    let out = settle(
        &env,
        vec![save(
            &run,
            "not-the-token",
            vec![entry(1, "a", StepStatus::Done)],
        )],
    )
    .await;
    assert_eq!(out, [false]);
    assert!(
        engine(&env)
            .run_journal(run.id.clone())
            .await
            .unwrap()
            .steps
            .is_empty()
    );
    // Written out of order, read by seq; a seq given twice in one save keeps its last entry.
    let out = settle(
        &env,
        vec![save(
            &run,
            &token,
            vec![
                entry(2, "b", StepStatus::Failed),
                entry(1, "a", StepStatus::Failed),
                entry(1, "a", StepStatus::Done),
            ],
        )],
    )
    .await;
    assert_eq!(out, [true]);
    let j = engine(&env).run_journal(run.id.clone()).await.unwrap();
    let seen: Vec<(i64, &str, StepStatus, i64)> = j
        .steps
        .iter()
        .map(|s| (s.seq, s.name.as_str(), s.status, s.attempt))
        .collect();
    assert_eq!(
        seen,
        [
            (1, "a", StepStatus::Done, run.attempt),
            (2, "b", StepStatus::Failed, run.attempt)
        ]
    );
    assert_eq!(j.steps[0].output, Some(json!({ "n": 1 })));
    assert_eq!(j.steps[1].error.as_deref(), Some("boom"));
    // A failed step run again replaces its record.
    let out = settle(
        &env,
        vec![save(&run, &token, vec![entry(2, "b", StepStatus::Done)])],
    )
    .await;
    assert_eq!(out, [true]);
    let j = engine(&env).run_journal(run.id.clone()).await.unwrap();
    assert_eq!(j.steps.len(), 2);
    assert_eq!(j.steps[1].status, StepStatus::Done);
    // Events come oldest first; a wait that took one marks it consumed.
    assert_eq!(
        send(&env, &run.id, "late", json!(1)).await,
        EventSent::Stored { woke: false }
    );
    env.clock.advance(secs(1));
    assert_eq!(
        send(&env, &run.id, "another", json!(2)).await,
        EventSent::Stored { woke: false }
    );
    let mut took = entry(3, "wait", StepStatus::Done);
    took.kind = StepKind::Event;
    took.consumes = Some("late".into());
    assert_eq!(
        settle(&env, vec![save(&run, &token, vec![took])]).await,
        [true]
    );
    let j = engine(&env).run_journal(run.id.clone()).await.unwrap();
    let names: Vec<&str> = j.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["late", "another"]);
    assert!(j.event("late").unwrap().consumed_at.is_some());
    assert!(j.event("another").unwrap().consumed_at.is_none());
    assert_eq!(j.event("late").unwrap().sent_by.as_deref(), Some("test"));
    // Steps and an end in one settle: the steps first, then the end; both fenced.
    let done = lease_end(&run, RunState::Completed);
    let out = settle(
        &env,
        vec![
            save(&run, &token, vec![entry(4, "d", StepStatus::Done)]),
            lease_done(done),
        ],
    )
    .await;
    assert_eq!(out, [true, true]);
    assert_eq!(
        engine(&env)
            .run_journal(run.id.clone())
            .await
            .unwrap()
            .steps
            .len(),
        4
    );
    let out = settle(
        &env,
        vec![save(&run, &token, vec![entry(5, "e", StepStatus::Done)])],
    )
    .await;
    assert_eq!(out, [false]);
}

fn lease_done(r: FinishRecord) -> Settlement {
    Settlement::End(Box::new(r))
}

#[tokio::test]
async fn event_send_answers_unknown_final_and_duplicate() {
    let env = TestEnv::new();
    assert_eq!(
        send(&env, &RunId::generate(), "x", json!(null)).await,
        EventSent::UnknownRun
    );
    let run = running(&env, "s1", "wk_a").await;
    assert_eq!(
        end(&env, vec![lease_end(&run, RunState::Completed)]).await,
        [true]
    );
    assert_eq!(
        send(&env, &run.id, "x", json!(null)).await,
        EventSent::Finished(RunState::Completed)
    );
    let q = queued(&env, "s1").await;
    assert_eq!(
        send(&env, &q, "go", json!({"first": true})).await,
        EventSent::Stored { woke: false }
    );
    env.clock.advance(secs(1));
    let EventSent::Duplicate(first) = send(&env, &q, "go", json!({"first": false})).await else {
        panic!("a second event of the name is a duplicate");
    };
    assert_eq!(first.payload, json!({"first": true}));
    assert_eq!(first.sent_at, now(&env) - secs(1));
    assert_eq!(engine(&env).run_journal(q).await.unwrap().events.len(), 1);
}

#[tokio::test]
async fn an_event_suspension_waits_wakes_on_its_event_and_resumes_the_same_attempt() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    let mut rec = suspend(&run, WaitKind::Event, Some("approved"), far_future());
    let mut wait = entry(1, "approved", StepStatus::Waiting);
    wait.kind = StepKind::Event;
    wait.wake_at = Some(far_future());
    rec.steps = vec![wait];
    assert_eq!(end(&env, vec![rec]).await, [true]);
    let r = get(&env, &run.id).await;
    assert_eq!((r.state, r.attempt), (RunState::Queued, run.attempt - 1));
    assert_eq!(r.run_at, far_future());
    assert_eq!(
        r.waiting,
        Some(Waiting {
            kind: WaitKind::Event,
            event: Some("approved".into()),
            until: far_future()
        })
    );
    assert!(r.lease_token.is_none());
    assert_eq!(crate::engine_contract::messages_of(&env, &run.id).await, 0);
    let j = engine(&env).run_journal(run.id.clone()).await.unwrap();
    assert_eq!((j.steps.len(), j.steps[0].attempt), (1, run.attempt));
    assert!(
        claim(&env, "wk_a", 1).await.is_empty(),
        "not due before its event"
    );
    // Another event does not wake it; its own does.
    assert_eq!(
        send(&env, &run.id, "other", json!(1)).await,
        EventSent::Stored { woke: false }
    );
    assert_eq!(
        send(&env, &run.id, "approved", json!(2)).await,
        EventSent::Stored { woke: true }
    );
    assert_eq!(get(&env, &run.id).await.run_at, now(&env));
    let again = claim(&env, "wk_a", 1).await;
    assert_eq!(again.len(), 1);
    assert_eq!((&again[0].id, again[0].attempt), (&run.id, run.attempt));
    // A final end clears the wait.
    assert_eq!(
        end(&env, vec![lease_end(&again[0], RunState::Completed)]).await,
        [true]
    );
    let r = get(&env, &run.id).await;
    assert_eq!((r.state, r.waiting), (RunState::Completed, None));
    assert_eq!(wait_columns(&env, &run.id), [None, None]);
}

#[tokio::test]
async fn an_event_sent_before_the_suspension_makes_it_due_at_once() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    assert_eq!(
        send(&env, &run.id, "go", json!(1)).await,
        EventSent::Stored { woke: false }
    );
    env.clock.advance(secs(2));
    let out = settle(
        &env,
        vec![lease_done(suspend(
            &run,
            WaitKind::Event,
            Some("go"),
            far_future(),
        ))],
    )
    .await;
    assert_eq!(out, [true]);
    let r = get(&env, &run.id).await;
    assert_eq!((r.state, r.run_at), (RunState::Queued, now(&env)));
    assert_eq!(r.waiting.as_ref().map(|w| w.kind), Some(WaitKind::Event));
}

#[tokio::test]
async fn snoozes_count_a_release_keeps_the_resume_and_waiting_ends_clear_the_wait() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    let until = now(&env) + secs(5);
    assert_eq!(
        end(&env, vec![suspend(&run, WaitKind::Snooze, None, until)]).await,
        [true]
    );
    let r = get(&env, &run.id).await;
    assert_eq!(
        (r.attempt, r.snoozes, r.run_at),
        (run.attempt - 1, 1, until)
    );
    assert_eq!(wait_columns(&env, &run.id), [Some("snooze".into()), None]);
    // Claimed again and handed back: still a resume (its log so far is kept next time).
    env.clock.advance(secs(5));
    let again = claim(&env, "wk_a", 1).await.remove(0);
    assert_eq!(again.attempt, run.attempt);
    let out = settle(
        &env,
        vec![Settlement::Release(Release {
            id: again.id.clone(),
            attempt: again.attempt,
            token: again.lease_token.clone().unwrap(),
        })],
    )
    .await;
    assert_eq!(out, [true]);
    assert_eq!(wait_columns(&env, &run.id), [Some("snooze".into()), None]);
    let again = claim(&env, "wk_a", 1).await.remove(0);
    assert!(again.resumed);
    // A suspended run cancelled while queued: the waiting end clears its wait.
    let until = now(&env) + secs(60);
    assert_eq!(
        end(&env, vec![suspend(&again, WaitKind::Sleep, None, until)]).await,
        [true]
    );
    let r = get(&env, &run.id).await;
    assert_eq!(r.snoozes, 1);
    assert_eq!(r.waiting.as_ref().map(|w| w.kind), Some(WaitKind::Sleep));
    assert_eq!(
        end(&env, vec![waiting_end(&r, RunState::Cancelled)]).await,
        [true]
    );
    assert_eq!(get(&env, &run.id).await.state, RunState::Cancelled);
    assert_eq!(wait_columns(&env, &run.id), [None, None]);
}
