//! Durable runs: step records saved under the lease in a settle, suspensions through the one
//! end-writer, events delivered (the first wins, a waiting run wakes, none is lost), and the
//! journal read.

use std::sync::Arc;

use serde_json::json;
use toolq::run::{
    EventSent, NewEvent, StepEntry, StepKind, StepSave, StepStatus, Suspension, WaitKind,
};
use toolq::store::{Settle, Settlement};

use super::*;
use crate::support::TestEnv;

/// A done step at `seq` whose output is `output`.
fn step(seq: i64, name: &str, output: serde_json::Value) -> StepEntry {
    StepEntry {
        seq,
        name: name.into(),
        kind: StepKind::Step,
        status: StepStatus::Done,
        output: Some(output.to_string()),
        error: None,
        wake_at: None,
        consumes: None,
    }
}

/// An event wait at `seq` that ended with `event`'s `payload` (and consumes it).
fn event_wait(seq: i64, event: &str, payload: serde_json::Value) -> StepEntry {
    StepEntry {
        seq,
        name: format!("event:{event}"),
        kind: StepKind::Event,
        status: StepStatus::Done,
        output: Some(json!({ "event": payload }).to_string()),
        error: None,
        wake_at: None,
        consumes: Some(event.into()),
    }
}

/// A settle of `batch` that claims nothing.
async fn settle(env: &TestEnv, batch: Vec<Settlement>) -> Vec<bool> {
    let p = Settle {
        batch: Arc::new(batch),
        claim: claim_of(env, "wk_a", 0),
    };
    engine(env).attempt_settle(p).await.unwrap().applied
}

/// A step save of `run`'s attempt under `token`.
fn save(run: &Run, token: &str, entries: Vec<StepEntry>) -> Settlement {
    Settlement::Step(Box::new(StepSave {
        id: run.id.clone(),
        attempt: run.attempt,
        token: token.into(),
        entries,
    }))
}

/// The end of `run`'s running attempt suspending it: no message, no result, no log (what a
/// worker's suspension brings), with `steps`.
fn suspend_end(run: &Run, s: Suspension, steps: Vec<StepEntry>) -> FinishRecord {
    let mut r = lease_end(run, RunState::Completed);
    r.outcome = Outcome::Suspend(s);
    r.error = None;
    r.log = None;
    r.result = None;
    r.message = None;
    r.steps = steps;
    r
}

async fn send(env: &TestEnv, run: &RunId, name: &str, payload: serde_json::Value) -> EventSent {
    engine(env)
        .event_send(NewEvent {
            run: run.clone(),
            name: name.into(),
            payload: payload.to_string(),
            sent_by: Some("contract".into()),
            now: now(env),
        })
        .await
        .unwrap()
}

async fn journal(env: &TestEnv, run: &RunId) -> toolq::run::Journal {
    engine(env).run_journal(run.clone()).await.unwrap()
}

/// (seq, name, status, output) of each recorded step.
async fn steps_of(env: &TestEnv, run: &RunId) -> Vec<(i64, String, StepStatus, serde_json::Value)> {
    journal(env, run)
        .await
        .steps
        .into_iter()
        .map(|s| {
            (
                s.seq,
                s.name,
                s.status,
                s.output.unwrap_or(serde_json::Value::Null),
            )
        })
        .collect()
}

#[tokio::test]
async fn attempt_settle_saves_steps_only_under_the_lease() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    let token = run.lease_token.clone().unwrap();

    // A wrong token (or an old attempt) writes nothing.
    let mut stale = run.clone();
    stale.attempt -= 1;
    assert_eq!(
        settle(
            &env,
            vec![
                save(&run, "not-the-token", vec![step(1, "a", json!(1))]),
                save(&stale, &token, vec![step(1, "a", json!(1))]),
            ]
        )
        .await,
        [false, false]
    );
    assert!(journal(&env, &run.id).await.steps.is_empty());

    // Under the lease: written, attempt and time recorded; the run keeps running.
    env.clock.advance(secs(1));
    assert_eq!(
        settle(
            &env,
            vec![save(&run, &token, vec![step(1, "a", json!({"n": 1}))])]
        )
        .await,
        [true]
    );
    let j = journal(&env, &run.id).await;
    assert_eq!(j.steps.len(), 1);
    let a = &j.steps[0];
    assert_eq!(
        (a.seq, a.name.as_str(), a.kind, a.status),
        (1, "a", StepKind::Step, StepStatus::Done)
    );
    assert_eq!(a.output, Some(json!({"n": 1})));
    assert_eq!((a.attempt, a.recorded_at), (run.attempt, now(&env)));
    let stored = get(&env, &run.id).await;
    assert_eq!(stored.state, RunState::Running);
    assert_eq!(stored.lease_token.as_deref(), Some(token.as_str()));

    // A failed step's record is replaced when it runs again at the same place.
    let mut failed = step(2, "b", json!(null));
    failed.status = StepStatus::Failed;
    failed.output = None;
    failed.error = Some("boom".into());
    assert_eq!(
        settle(&env, vec![save(&run, &token, vec![failed])]).await,
        [true]
    );
    assert_eq!(
        journal(&env, &run.id).await.steps[1].error.as_deref(),
        Some("boom")
    );
    assert_eq!(
        settle(
            &env,
            vec![save(&run, &token, vec![step(2, "b", json!("ok"))])]
        )
        .await,
        [true]
    );
    let j = journal(&env, &run.id).await;
    assert_eq!(j.steps.len(), 2, "replaced, not added: {:?}", j.steps);
    assert_eq!(
        (j.steps[1].status, j.steps[1].error.as_deref()),
        (StepStatus::Done, None)
    );
    assert_eq!(j.steps[1].output, Some(json!("ok")));

    // An entry that consumes an event marks it consumed in the same write.
    assert_eq!(
        send(&env, &run.id, "go", json!({"x": 1})).await,
        EventSent::Stored { woke: false }
    );
    assert_eq!(journal(&env, &run.id).await.events[0].consumed_at, None);
    env.clock.advance(secs(1));
    assert_eq!(
        settle(
            &env,
            vec![save(
                &run,
                &token,
                vec![event_wait(3, "go", json!({"x": 1}))]
            )]
        )
        .await,
        [true]
    );
    let j = journal(&env, &run.id).await;
    assert_eq!(j.events[0].consumed_at, Some(now(&env)));
    assert_eq!(j.steps[2].output, Some(json!({"event": {"x": 1}})));

    // A fenced-out save consumes nothing either.
    let other = running(&env, "s1", "wk_a").await;
    send(&env, &other.id, "go", json!(2)).await;
    assert_eq!(
        settle(
            &env,
            vec![save(&other, "wrong", vec![event_wait(1, "go", json!(2))])]
        )
        .await,
        [false]
    );
    let j = journal(&env, &other.id).await;
    assert!(j.steps.is_empty());
    assert_eq!(j.events[0].consumed_at, None);

    // Once the attempt ended, its lease no longer holds: a late save is refused.
    assert_eq!(
        end(&env, vec![lease_end(&run, RunState::Completed)]).await,
        [true]
    );
    assert_eq!(
        settle(
            &env,
            vec![save(&run, &token, vec![step(4, "late", json!(4))])]
        )
        .await,
        [false]
    );
    assert_eq!(journal(&env, &run.id).await.steps.len(), 3);
}

#[tokio::test]
async fn run_end_suspends_without_an_attempt_or_a_message_and_resumes_the_same_attempt() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    assert_eq!(run.attempt, 1);
    let until = now(&env) + secs(3600);
    let wait = Suspension {
        kind: WaitKind::Event,
        event: Some("go".into()),
        until,
    };
    let mut waiting_step = event_wait(2, "go", json!(null));
    waiting_step.status = StepStatus::Waiting;
    waiting_step.output = None;
    waiting_step.consumes = None;
    waiting_step.wake_at = Some(until);
    let steps = vec![step(1, "a", json!(1)), waiting_step];
    // A suspension fenced out (wrong token) writes nothing, steps included.
    let mut wrong = suspend_end(&run, wait.clone(), steps.clone());
    wrong.fence = Fence::Lease("not-the-token".into());
    assert_eq!(end(&env, vec![wrong]).await, [false]);
    assert!(journal(&env, &run.id).await.steps.is_empty());

    assert_eq!(
        end(&env, vec![suspend_end(&run, wait.clone(), steps)]).await,
        [true]
    );
    let r = get(&env, &run.id).await;
    assert_eq!(r.state, RunState::Queued);
    assert_eq!(r.attempt, 0, "the attempt is given back");
    assert_eq!(r.run_at, until);
    assert_eq!(r.snoozes, 0);
    assert!(r.lease_owner.is_none() && r.lease_token.is_none());
    assert!(r.finished_at.is_none());
    let w = r.waiting.clone().expect("the run waits");
    assert_eq!(
        (w.kind, w.event.as_deref(), w.until),
        (WaitKind::Event, Some("go"), until)
    );
    assert_eq!(
        messages_of(&env, &run.id).await,
        0,
        "a suspension posts nothing"
    );
    let names: Vec<(i64, String, StepStatus)> = steps_of(&env, &run.id)
        .await
        .into_iter()
        .map(|(seq, name, status, _)| (seq, name, status))
        .collect();
    assert_eq!(
        names,
        [
            (1, "a".to_string(), StepStatus::Done),
            (2, "event:go".to_string(), StepStatus::Waiting)
        ]
    );
    // Not due before `until` (nothing was sent): no claim.
    assert!(claim(&env, "wk_a", 5).await.is_empty());
    // A second end of the same (given back) attempt is fenced out.
    assert_eq!(
        end(&env, vec![lease_end(&run, RunState::Completed)]).await,
        [false]
    );

    // At `until` it is claimed again as the same attempt.
    env.clock.advance(secs(3600));
    let again = claim(&env, "wk_a", 5).await;
    assert_eq!(again.len(), 1);
    let again = &again[0];
    assert_eq!((again.attempt, again.state), (1, RunState::Running));
    assert!(again.waiting.is_none(), "a running run waits for nothing");

    // A snooze: counted, no attempt, no message.
    let snooze = Suspension {
        kind: WaitKind::Snooze,
        event: None,
        until: now(&env) + secs(60),
    };
    assert_eq!(
        end(&env, vec![suspend_end(again, snooze, Vec::new())]).await,
        [true]
    );
    let r = get(&env, &run.id).await;
    assert_eq!((r.state, r.attempt, r.snoozes), (RunState::Queued, 0, 1));
    let w = r.waiting.clone().unwrap();
    assert_eq!((w.kind, w.event), (WaitKind::Snooze, None));
    assert_eq!(r.run_at, now(&env) + secs(60));
    assert_eq!(messages_of(&env, &run.id).await, 0);

    // A final end clears the wait and posts the one message.
    env.clock.advance(secs(60));
    let third = claim(&env, "wk_a", 5).await;
    assert_eq!(third[0].attempt, 1);
    let mut fin = lease_end(&third[0], RunState::Completed);
    fin.steps = vec![step(3, "c", json!(3))];
    assert_eq!(end(&env, vec![fin]).await, [true]);
    let r = get(&env, &run.id).await;
    assert_eq!((r.state, r.attempt, r.snoozes), (RunState::Completed, 1, 1));
    assert!(r.waiting.is_none());
    assert_eq!(messages_of(&env, &run.id).await, 1);
    assert_eq!(
        journal(&env, &run.id).await.steps.len(),
        3,
        "a final end's steps too"
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM runs WHERE id = '{}' AND wait_kind IS NULL \
             AND wait_event IS NULL",
            run.id
        )),
        1
    );

    // A suspended run cancelled while it waits: the wait is cleared too.
    let other = running(&env, "s1", "wk_a").await;
    let sleep = Suspension {
        kind: WaitKind::Sleep,
        event: None,
        until: now(&env) + secs(600),
    };
    assert_eq!(
        end(&env, vec![suspend_end(&other, sleep, Vec::new())]).await,
        [true]
    );
    let waiting = get(&env, &other.id).await;
    assert_eq!(waiting.waiting.as_ref().unwrap().kind, WaitKind::Sleep);
    assert_eq!(
        end(&env, vec![waiting_end(&waiting, RunState::Cancelled)]).await,
        [true]
    );
    let r = get(&env, &other.id).await;
    assert_eq!((r.state, r.waiting), (RunState::Cancelled, None));
    assert_eq!(messages_of(&env, &other.id).await, 1);
}

#[tokio::test]
async fn run_end_suspending_for_an_event_already_sent_is_due_at_once() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    // The signal came while the run was still running: stored, nothing to wake.
    assert_eq!(
        send(&env, &run.id, "go", json!("early")).await,
        EventSent::Stored { woke: false }
    );
    env.clock.advance(secs(5));
    let wait = Suspension {
        kind: WaitKind::Event,
        event: Some("go".into()),
        until: toolq::run::steps::far_future(),
    };
    assert_eq!(
        end(&env, vec![suspend_end(&run, wait.clone(), Vec::new())]).await,
        [true]
    );
    let r = get(&env, &run.id).await;
    assert_eq!(r.state, RunState::Queued);
    assert_eq!(r.run_at, now(&env), "due now: the wake-up is not lost");
    assert_eq!(r.waiting.unwrap().kind, WaitKind::Event);
    assert_eq!(claim(&env, "wk_a", 5).await.len(), 1);

    // Another event's arrival does not wake a wait for "go".
    let other = running(&env, "s2", "wk_a").await;
    send(&env, &other.id, "stop", json!(1)).await;
    assert_eq!(
        end(&env, vec![suspend_end(&other, wait, Vec::new())]).await,
        [true]
    );
    let r = get(&env, &other.id).await;
    assert_eq!(r.run_at, toolq::run::steps::far_future());
    assert!(claim(&env, "wk_a", 5).await.is_empty());
}

#[tokio::test]
async fn event_send_stores_the_first_delivery_and_wakes_a_run_waiting_for_it() {
    let env = TestEnv::new();
    // Unknown and finished runs take no event.
    assert_eq!(
        send(&env, &RunId::generate(), "go", json!(1)).await,
        EventSent::UnknownRun
    );
    let done = cancelled(&env, "s1").await;
    assert_eq!(
        send(&env, &done, "go", json!(1)).await,
        EventSent::Finished(RunState::Cancelled)
    );
    assert!(journal(&env, &done).await.events.is_empty());

    // A running run: stored, nobody woken; a second delivery returns the first, unchanged.
    let run = running(&env, "s1", "wk_a").await;
    assert_eq!(
        send(&env, &run.id, "go", json!({"first": true})).await,
        EventSent::Stored { woke: false }
    );
    let sent_at = now(&env);
    env.clock.advance(secs(1));
    match send(&env, &run.id, "go", json!({"second": true})).await {
        EventSent::Duplicate(first) => {
            assert_eq!(first.name, "go");
            assert_eq!(first.payload, json!({"first": true}));
            assert_eq!(first.sent_at, sent_at);
            assert_eq!(first.sent_by.as_deref(), Some("contract"));
            assert_eq!(first.consumed_at, None);
        }
        other => panic!("expected the first event back, got {other:?}"),
    }
    let j = journal(&env, &run.id).await;
    assert_eq!(j.events.len(), 1);
    assert_eq!(j.event("go").unwrap().payload, json!({"first": true}));
    assert_eq!(get(&env, &run.id).await.state, RunState::Running);

    // A run suspended on "go": the event wakes it (due now), the same attempt resumes.
    let sleeper = running(&env, "s3", "wk_a").await;
    let wait = Suspension {
        kind: WaitKind::Event,
        event: Some("go".into()),
        until: now(&env) + secs(86_400),
    };
    assert_eq!(
        end(&env, vec![suspend_end(&sleeper, wait, Vec::new())]).await,
        [true]
    );
    // A queued run that does not wait (or waits its turn) is not woken, only stored.
    let plain = queued(&env, "s2").await;
    assert_eq!(
        send(&env, &plain, "go", json!(null)).await,
        EventSent::Stored { woke: false }
    );

    env.clock.advance(secs(10));
    // Another name does not wake it.
    assert_eq!(
        send(&env, &sleeper.id, "other", json!(0)).await,
        EventSent::Stored { woke: false }
    );
    assert_eq!(
        get(&env, &sleeper.id).await.run_at,
        now(&env) - secs(10) + secs(86_400)
    );
    assert_eq!(
        send(&env, &sleeper.id, "go", json!("now")).await,
        EventSent::Stored { woke: true }
    );
    let r = get(&env, &sleeper.id).await;
    assert_eq!((r.state, r.run_at), (RunState::Queued, now(&env)));
    assert_eq!(
        messages_of(&env, &sleeper.id).await,
        0,
        "an event posts nothing"
    );
    // A duplicate to the woken run wakes nothing more.
    assert!(matches!(
        send(&env, &sleeper.id, "go", json!("again")).await,
        EventSent::Duplicate(_)
    ));
    let claimed = claim_of(&env, "wk_a", 5);
    let got = engine(&env).attempt_claim(claimed).await.unwrap();
    let resumed = got
        .iter()
        .find(|r| r.id == sleeper.id)
        .expect("woken and claimed");
    assert_eq!(resumed.attempt, 1);
}

#[tokio::test]
async fn run_journal_reads_steps_by_seq_and_events_oldest_first() {
    let env = TestEnv::new();
    assert_eq!(
        journal(&env, &RunId::generate()).await,
        toolq::run::Journal::default(),
        "an unknown run has an empty journal"
    );
    let run = running(&env, "s1", "wk_a").await;
    let token = run.lease_token.clone().unwrap();
    // Saved out of order, in two settles: read back by seq.
    assert_eq!(
        settle(
            &env,
            vec![save(
                &run,
                &token,
                vec![step(3, "c", json!(3)), step(1, "a", json!(1))]
            )]
        )
        .await,
        [true]
    );
    assert_eq!(
        settle(&env, vec![save(&run, &token, vec![step(2, "b", json!(2))])]).await,
        [true]
    );
    // Events sent at different times, names against their time order.
    for (name, payload) in [("zeta", json!(1)), ("alpha", json!(2)), ("mid", json!(3))] {
        send(&env, &run.id, name, payload).await;
        env.clock.advance(secs(1));
    }
    let j = journal(&env, &run.id).await;
    let seqs: Vec<(i64, &str)> = j.steps.iter().map(|s| (s.seq, s.name.as_str())).collect();
    assert_eq!(seqs, [(1, "a"), (2, "b"), (3, "c")]);
    let names: Vec<&str> = j.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["zeta", "alpha", "mid"]);
    assert_eq!(j.event("alpha").unwrap().payload, json!(2));
    assert!(j.event("nope").is_none());
    // Another run's journal is its own.
    let other = running(&env, "s1", "wk_a").await;
    assert_eq!(
        journal(&env, &other.id).await,
        toolq::run::Journal::default()
    );
}

/// A settle that carries an attempt's last step save and its hand-back (a worker stopping
/// while the step's record was on its way) writes the steps first: the step's closure ran
/// and its worker did not die, so its record must not be lost.
#[tokio::test]
async fn attempt_settle_writes_steps_before_a_release_of_the_same_attempt() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    let token = run.lease_token.clone().unwrap();
    let release = Settlement::Release(toolq::store::Release {
        id: run.id.clone(),
        attempt: run.attempt,
        token: token.clone(),
    });
    assert_eq!(
        settle(
            &env,
            vec![release, save(&run, &token, vec![step(1, "a", json!(1))])]
        )
        .await,
        [true, true]
    );
    let r = get(&env, &run.id).await;
    assert_eq!((r.state, r.attempt), (RunState::Queued, 0));
    assert_eq!(
        steps_of(&env, &run.id).await.len(),
        1,
        "the step was recorded"
    );
}
