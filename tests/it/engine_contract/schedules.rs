//! Schedules: limits, reads, cancel and enable, and the claim of due ticks.

use std::sync::Arc;

use toolq::flow::{Pause, PauseScope};
use toolq::ids::ScheduleId;
use toolq::schedule::model::NewSchedule;
use toolq::store::{ClaimDue, GateRun, ScheduleEnable};
use toolq::{MissedPolicy, OverlapPolicy};

use super::*;
use crate::support::TestEnv;

/// A schedule of `session` firing every minute, next at `next`.
pub(crate) fn new_schedule(env: &TestEnv, session: &str, next: DateTime<Utc>) -> NewSchedule {
    NewSchedule {
        tags: Default::default(),
        id: ScheduleId::generate(),
        session_id: session.into(),
        tool: TOOL.into(),
        args: json!({"message": "tick"}),
        title: "every minute".into(),
        cron_expression: Some("* * * * *".into()),
        scheduled_at: None,
        timezone: "UTC".into(),
        next_trigger_at: Some(next),
        missed_policy: MissedPolicy::Once,
        catchup_window_ms: None,
        overlap_policy: OverlapPolicy::Allow,
        priority: 0,
        max_attempts: 1,
        timeout_ms: None,
        signal_on_completion: false,
        delivery: Delivery::WhenIdle,
        created_at: now(env),
    }
}

/// Inserts a schedule (no limit that matters); its id.
pub(crate) async fn insert_schedule(env: &TestEnv, session: &str, next: DateTime<Utc>) -> String {
    let new = new_schedule(env, session, next);
    let id = new.id.to_string();
    assert!(
        engine(env)
            .schedule_insert_within_limit(new, 100)
            .await
            .unwrap()
    );
    id
}

fn due(env: &TestEnv) -> ClaimDue {
    ClaimDue {
        now: now(env),
        limit: 10,
        late_after: secs(30),
        catchup_spacing: secs(1),
    }
}

fn no_gate() -> GateRun {
    Arc::new(|_, _| None)
}

#[tokio::test]
async fn schedule_insert_within_limit_holds_the_session_limit() {
    let env = TestEnv::new();
    let next = now(&env) + secs(60);
    let first = new_schedule(&env, "s1", next);
    let first_id = first.id.to_string();
    assert!(
        engine(&env)
            .schedule_insert_within_limit(first, 1)
            .await
            .unwrap()
    );
    let second = new_schedule(&env, "s1", next);
    let second_id = second.id.to_string();
    assert!(
        !engine(&env)
            .schedule_insert_within_limit(second, 1)
            .await
            .unwrap()
    );
    assert!(
        engine(&env)
            .schedule_get(second_id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        engine(&env)
            .schedule_insert_within_limit(new_schedule(&env, "s2", next), 1)
            .await
            .unwrap()
    );
    // A cancelled schedule no longer counts.
    engine(&env)
        .schedule_cancel(first_id, now(&env))
        .await
        .unwrap();
    assert!(
        engine(&env)
            .schedule_insert_within_limit(new_schedule(&env, "s1", next), 1)
            .await
            .unwrap()
    );
}

async fn list(env: &TestEnv, session: Option<&str>, limit: i64) -> Vec<String> {
    let got = engine(env)
        .schedule_list(session.map(str::to_string), limit)
        .await
        .unwrap();
    got.into_iter().map(|s| s.id.to_string()).collect()
}

#[tokio::test]
async fn schedule_reads_get_list_and_occurrences() {
    let env = TestEnv::new();
    let a = insert_schedule(&env, "s1", now(&env)).await;
    env.clock.advance(secs(1));
    let b = insert_schedule(&env, "s1", now(&env) + secs(59)).await;
    env.clock.advance(secs(1));
    let c = insert_schedule(&env, "s2", now(&env) + secs(58)).await;
    assert!(
        engine(&env)
            .schedule_get("sch_nothing".into())
            .await
            .unwrap()
            .is_none()
    );
    let got = engine(&env)
        .schedule_get(a.clone())
        .await
        .unwrap()
        .expect("the schedule");
    assert_eq!(
        (got.session_id.as_str(), got.tool.as_str(), got.enabled),
        ("s1", TOOL, true)
    );
    assert_eq!(got.cron_expression.as_deref(), Some("* * * * *"));
    assert_eq!(list(&env, Some("s1"), 10).await, [b.clone(), a.clone()]);
    assert_eq!(
        list(&env, None, 10).await,
        [c.clone(), b.clone(), a.clone()]
    );
    assert_eq!(list(&env, None, 1).await, [c]);
    // The ledger: newest first, a row per tick.
    env.clock.set(now(&env) - secs(2));
    let report = engine(&env)
        .schedule_claim_due(due(&env), no_gate())
        .await
        .unwrap();
    assert_eq!(report.runs.len(), 1);
    let rows = engine(&env)
        .schedule_occurrences(a.clone(), 10)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].outcome.as_str(), rows[0].run_id.as_ref()),
        ("fired", Some(&report.runs[0]))
    );
    assert_eq!(rows[0].fire_at, now(&env));
    assert!(
        engine(&env)
            .schedule_occurrences(b, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn schedule_cancel_only_an_enabled_schedule() {
    let env = TestEnv::new();
    let id = insert_schedule(&env, "s1", now(&env) + secs(60)).await;
    assert!(
        engine(&env)
            .schedule_cancel(id.clone(), now(&env))
            .await
            .unwrap()
    );
    let got = engine(&env)
        .schedule_get(id.clone())
        .await
        .unwrap()
        .unwrap();
    assert!(!got.enabled);
    assert!(
        !engine(&env)
            .schedule_cancel(id.clone(), now(&env))
            .await
            .unwrap()
    );
    assert!(
        !engine(&env)
            .schedule_cancel("sch_nothing".into(), now(&env))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn schedule_disable_only_an_enabled_schedule_and_does_not_mark_it_cancelled() {
    let env = TestEnv::new();
    let id = insert_schedule(&env, "s1", now(&env) + secs(60)).await;
    assert!(
        engine(&env)
            .schedule_disable(id.clone(), now(&env))
            .await
            .unwrap()
    );
    let got = engine(&env)
        .schedule_get(id.clone())
        .await
        .unwrap()
        .unwrap();
    assert!(!got.enabled);
    assert_eq!(got.cancelled_at, None, "disabled, not cancelled");
    assert!(
        !engine(&env)
            .schedule_disable(id.clone(), now(&env))
            .await
            .unwrap(),
        "a disabled schedule is not disabled twice"
    );
    assert!(
        !engine(&env)
            .schedule_disable("sch_nothing".into(), now(&env))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn schedule_enable_within_limit_holds_the_session_limit() {
    let env = TestEnv::new();
    let a = insert_schedule(&env, "s1", now(&env) + secs(60)).await;
    let b = insert_schedule(&env, "s1", now(&env) + secs(60)).await;
    engine(&env)
        .schedule_cancel(a.clone(), now(&env))
        .await
        .unwrap();
    engine(&env)
        .schedule_cancel(b.clone(), now(&env))
        .await
        .unwrap();
    let next = now(&env) + secs(120);
    let enable = |id: &str| ScheduleEnable {
        id: id.into(),
        session: "s1".into(),
        next,
        now: now(&env),
        max_active: 1,
    };
    assert_eq!(
        engine(&env)
            .schedule_enable_within_limit(enable(&a))
            .await
            .unwrap(),
        Some(true)
    );
    let got = engine(&env).schedule_get(a.clone()).await.unwrap().unwrap();
    assert_eq!((got.enabled, got.next_trigger_at), (true, Some(next)));
    // The session is at its limit: nothing changes.
    assert_eq!(
        engine(&env)
            .schedule_enable_within_limit(enable(&b))
            .await
            .unwrap(),
        None
    );
    assert!(!engine(&env).schedule_get(b).await.unwrap().unwrap().enabled);
}

#[tokio::test]
async fn schedule_next_due_is_the_earliest_enabled_tick() {
    let env = TestEnv::new();
    assert_eq!(engine(&env).schedule_next_due().await.unwrap(), None);
    insert_schedule(&env, "s1", now(&env) + secs(60)).await;
    insert_schedule(&env, "s1", now(&env) + secs(30)).await;
    let off = insert_schedule(&env, "s1", now(&env) + secs(10)).await;
    engine(&env).schedule_cancel(off, now(&env)).await.unwrap();
    assert_eq!(
        engine(&env).schedule_next_due().await.unwrap(),
        Some(now(&env) + secs(30))
    );
}

#[tokio::test]
async fn schedule_claim_due_fires_a_tick_once() {
    let env = TestEnv::new();
    let id = insert_schedule(&env, "s1", now(&env)).await;
    let first = engine(&env)
        .schedule_claim_due(due(&env), no_gate())
        .await
        .unwrap();
    assert_eq!((first.schedules, first.fired, first.runs.len()), (1, 1, 1));
    let second = engine(&env)
        .schedule_claim_due(due(&env), no_gate())
        .await
        .unwrap();
    assert_eq!((second.fired, second.runs.len()), (0, 0));
    let made = get(&env, &first.runs[0]).await;
    assert_eq!(
        made.schedule_id.as_ref().map(|s| s.to_string()),
        Some(id.clone())
    );
    assert_eq!(
        (made.fire_at, made.state),
        (Some(now(&env)), RunState::Queued)
    );
    let schedule = engine(&env)
        .schedule_get(id.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(schedule.next_trigger_at, Some(now(&env) + secs(60)));
    assert_eq!(
        engine(&env)
            .schedule_occurrences(id.clone(), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // Two workers polling at once: one of them fires the next tick.
    env.clock.advance(secs(60));
    let (x, y) = tokio::join!(
        engine(&env).schedule_claim_due(due(&env), no_gate()),
        engine(&env).schedule_claim_due(due(&env), no_gate()),
    );
    assert_eq!(x.unwrap().runs.len() + y.unwrap().runs.len(), 1);
    assert_eq!(
        engine(&env)
            .schedule_occurrences(id.clone(), 10)
            .await
            .unwrap()
            .len(),
        2
    );
    // And the tick after.
    env.clock.advance(secs(60));
    let third = engine(&env)
        .schedule_claim_due(due(&env), no_gate())
        .await
        .unwrap();
    assert_eq!(third.runs.len(), 1);
    assert_eq!(
        engine(&env)
            .schedule_occurrences(id, 10)
            .await
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn schedule_claim_due_records_a_paused_tick_and_gates_runs() {
    let env = TestEnv::new();
    let id = insert_schedule(&env, "s1", now(&env)).await;
    let pause = Pause {
        scope: PauseScope::Tool(TOOL.into()),
        since: now(&env),
        by: None,
        reason: None,
    };
    engine(&env).pause_set(pause).await.unwrap();
    let report = engine(&env)
        .schedule_claim_due(due(&env), no_gate())
        .await
        .unwrap();
    assert_eq!((report.paused, report.runs.len()), (1, 0));
    let rows = engine(&env).schedule_occurrences(id, 10).await.unwrap();
    assert_eq!(
        rows.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
        ["paused"]
    );
    // The gate decides which runs wait for approval; they are stored as run_insert does.
    let env = TestEnv::new();
    insert_schedule(&env, "s1", now(&env)).await;
    let gate: GateRun = Arc::new(|run: &NewRun, _args: &serde_json::Value| {
        Some(toolq::run::PendingApproval {
            deadline: None,
            message: NewMessage {
                session_id: run.session_id.clone(),
                run_id: run.id.to_string(),
                attempt: 0,
                kind: "approval_request",
                body: "approve the tick?".into(),
                data: json!({}),
                delivery: Delivery::WhenIdle,
            },
            message_data: "{}".into(),
        })
    });
    let report = engine(&env)
        .schedule_claim_due(due(&env), gate)
        .await
        .unwrap();
    let made = get(&env, &report.runs[0]).await;
    assert_eq!(
        (made.state, made.approval_state.as_deref()),
        (RunState::AwaitingApproval, Some("pending"))
    );
    let about = engine(&env).inbox_of_run(made.id, 10).await.unwrap();
    assert_eq!(
        about.iter().map(|m| m.kind.as_str()).collect::<Vec<_>>(),
        ["approval_request"]
    );
}
