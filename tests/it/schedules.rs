//! Schedules on the manual clock: exactly-once firing across workers, catch-up after downtime,
//! missed-ticks and overlap policies, one-shots, limits, bad input, and spawn_background.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Duration as Span;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolq::schedule::{MissedPolicy, OverlapPolicy, ScheduleRequest};
use toolq::tool::ToolHints;
use toolq::{Client, Config, RegistryBuilder, Tool, ToolContext, ToolDef, ToolOutcome};

use crate::support::{TestEnv, t, wait_for};

/// A tool that refuses to run in the background.
pub struct Foreground;
#[async_trait]
impl Tool for Foreground {
    fn definition(&self) -> ToolDef {
        ToolDef::new("foreground", "foreground only", json!({"type": "object"})).hints(ToolHints {
            readonly: true,
            idempotent: true,
            supports_background: false,
        })
    }
    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        ToolOutcome::ok(Value::Null)
    }
}

/// Another client on the same file and clock (a second worker process, as far as SQLite knows).
pub fn second_client(env: &TestEnv, f: impl FnOnce(&mut Config)) -> Client {
    let mut config = env.client.config().clone();
    f(&mut config);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(Foreground)
        .tool(crate::support::Counter(env.counter.clone()))
        .build()
        .unwrap();
    Client::open_with_clock(config, registry, Arc::new(env.clock.clone())).unwrap()
}

pub fn rows(env: &TestEnv, sql: &str) -> Vec<Vec<String>> {
    env.db
        .rows(sql)
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_else(|| "NULL".into()))
                .collect()
        })
        .collect()
}

fn every_ten() -> ScheduleRequest {
    ScheduleRequest::cron("echo", json!({"message": "check"}), "*/10 * * * *")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_polling_one_file_fire_each_tick_once() {
    let env = TestEnv::new();
    let other = second_client(&env, |_| {});
    let s = env
        .client
        .create_schedule({
            let mut r = ScheduleRequest::cron("echo", json!({"message": "hi"}), "* * * * *");
            r.overlap = OverlapPolicy::Allow;
            r
        })
        .await
        .unwrap();
    for _ in 0..30 {
        env.clock.advance(Span::minutes(1));
        let mut tasks = Vec::new();
        for c in [
            env.client.clone(),
            other.clone(),
            env.client.clone(),
            other.clone(),
        ] {
            tasks.push(tokio::spawn(async move {
                let mut runs = 0;
                for _ in 0..3 {
                    runs += c.fire_due_schedules().await.unwrap().runs.len();
                }
                runs
            }));
        }
        let mut fired = 0;
        for task in tasks {
            fired += task.await.unwrap();
        }
        assert_eq!(fired, 1, "exactly one poller fires each tick");
    }
    assert_eq!(env.count("SELECT count(*) FROM runs"), 30);
    assert_eq!(env.count("SELECT count(DISTINCT fire_at) FROM runs"), 30);
    assert_eq!(
        env.count("SELECT count(*) FROM schedule_occurrences WHERE outcome = 'fired'"),
        30
    );
    let d = env.client.get_schedule(&s.id).await.unwrap();
    assert_eq!(d.schedule.trigger_count, 30);
    assert_eq!(d.schedule.next_trigger_at, Some(t("2026-11-01T12:31:00Z")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_real_workers_run_each_tick_once() {
    let env = TestEnv::new();
    let other = second_client(&env, |_| {});
    env.client
        .create_schedule(ScheduleRequest::cron("counter", json!({}), "* * * * *"))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let a = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    let b = tokio::spawn(other.worker(Default::default()).run(stop.clone()));
    for i in 1..=5 {
        env.clock.advance(Span::minutes(1));
        wait_for("the tick's run to complete", async || {
            let n = env.count("SELECT count(*) FROM runs WHERE state = 'completed'");
            let seen = rows(&env, "SELECT state, run_at, internal_error FROM runs");
            (
                (n == i).then_some(()),
                format!("{n} completed; runs {seen:?}"),
            )
        })
        .await;
    }
    stop.cancel();
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    assert_eq!(env.count("SELECT count(*) FROM runs"), 5);
    assert_eq!(env.counter.load(std::sync::atomic::Ordering::SeqCst), 5);
}

#[tokio::test]
async fn downtime_gives_one_catch_up_per_schedule_with_the_ledger() {
    let env = TestEnv::new();
    let mut ids = Vec::new();
    for tz in ["UTC", "America/Chicago", "Europe/Berlin"] {
        let s = env
            .client
            .create_schedule(every_ten().timezone(tz))
            .await
            .unwrap();
        assert_eq!(s.next_trigger_at, Some(t("2026-11-01T12:10:00Z")));
        ids.push(s.id);
    }
    // Five hours of downtime: ticks 12:10 .. 17:00 (30 of them) were missed.
    env.clock.set(t("2026-11-01T17:05:00Z"));
    let r = env.client.fire_due_schedules().await.unwrap();
    assert_eq!(r.runs.len(), 3, "{r:?}");
    assert_eq!(env.client.fire_due_schedules().await.unwrap().runs.len(), 0);
    for id in &ids {
        let d = env.client.get_schedule(id).await.unwrap();
        assert_eq!(d.schedule.next_trigger_at, Some(t("2026-11-01T17:10:00Z")));
        assert_eq!(d.next_fires[1], t("2026-11-01T17:20:00Z"));
        let runs = rows(
            &env,
            &format!("SELECT id, fire_at, ticks FROM runs WHERE schedule_id = '{id}'"),
        );
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0][1], "2026-11-01T17:00:00.000Z");
        assert_eq!(runs[0][2], "30");
        let ledger = rows(
            &env,
            &format!(
                "SELECT outcome, count(*), count(DISTINCT run_id) FROM schedule_occurrences \
                 WHERE schedule_id = '{id}' GROUP BY outcome ORDER BY outcome"
            ),
        );
        assert_eq!(
            ledger,
            vec![
                vec!["coalesced".to_string(), "29".into(), "1".into()],
                vec!["fired".to_string(), "1".into(), "1".into()],
            ]
        );
    }
    // Catch-up starts are spread: 2 per second by default.
    let starts = rows(&env, "SELECT run_at FROM runs ORDER BY run_at");
    assert_eq!(
        starts,
        vec![
            vec!["2026-11-01T17:05:00.000Z".to_string()],
            vec!["2026-11-01T17:05:00.500Z".to_string()],
            vec!["2026-11-01T17:05:01.000Z".to_string()],
        ]
    );
    // The recent_occurrences view shows the ledger to ops.
    assert_eq!(
        env.count("SELECT count(*) FROM schedule_occurrences"),
        3 * 30
    );
}

#[tokio::test]
async fn skip_and_all_policies() {
    let env = TestEnv::new();
    let mut skip = every_ten();
    skip.missed = MissedPolicy::Skip;
    let skip = env.client.create_schedule(skip).await.unwrap();
    let mut all = every_ten();
    all.missed = MissedPolicy::All;
    all.catchup_window = Some(Duration::from_secs(30 * 60));
    all.overlap = OverlapPolicy::Allow;
    let all = env.client.create_schedule(all).await.unwrap();
    env.clock.set(t("2026-11-01T13:05:00Z"));
    env.client.fire_due_schedules().await.unwrap();
    // skip: 12:10 .. 13:00 all missed, nothing runs, next stays on the grid.
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM runs WHERE schedule_id = '{}'",
            skip.id
        )),
        0
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM schedule_occurrences WHERE schedule_id = '{}' AND outcome = 'missed'",
            skip.id
        )),
        6
    );
    let s = env.client.get_schedule(&skip.id).await.unwrap().schedule;
    assert_eq!(s.next_trigger_at, Some(t("2026-11-01T13:10:00Z")));
    // all within 30 minutes: 12:40, 12:50, 13:00 each run; 12:10 .. 12:30 missed.
    let fired = rows(
        &env,
        &format!(
            "SELECT fire_at, ticks FROM runs WHERE schedule_id = '{}' ORDER BY fire_at",
            all.id
        ),
    );
    assert_eq!(
        fired,
        vec![
            vec!["2026-11-01T12:40:00.000Z".to_string(), "1".into()],
            vec!["2026-11-01T12:50:00.000Z".to_string(), "1".into()],
            vec!["2026-11-01T13:00:00.000Z".to_string(), "1".into()],
        ]
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM schedule_occurrences WHERE schedule_id = '{}' AND outcome = 'missed'",
            all.id
        )),
        3
    );
    // Back on time: the next tick fires normally under every policy.
    env.clock.set(t("2026-11-01T13:10:00.300Z"));
    let r = env.client.fire_due_schedules().await.unwrap();
    assert_eq!(r.runs.len(), 2, "{r:?}");
}

#[tokio::test]
async fn a_tick_while_the_previous_run_is_active_is_skipped_and_recorded() {
    let env = TestEnv::new();
    let s = env.client.create_schedule(every_ten()).await.unwrap();
    env.clock.set(t("2026-11-01T12:10:00Z"));
    assert_eq!(env.client.fire_due_schedules().await.unwrap().runs.len(), 1);
    // No worker ran it: still queued at the next tick.
    env.clock.set(t("2026-11-01T12:20:00Z"));
    let r = env.client.fire_due_schedules().await.unwrap();
    assert_eq!((r.runs.len(), r.skipped_overlap), (0, 1));
    let d = env.client.get_schedule(&s.id).await.unwrap();
    assert_eq!(d.occurrences[0].outcome, "skipped_overlap");
    assert_eq!(d.occurrences[0].fire_at, t("2026-11-01T12:20:00Z"));
    assert_eq!(d.occurrences[1].outcome, "fired");
    assert_eq!(d.occurrences[1].run_state.as_deref(), Some("queued"));
    assert_eq!(d.schedule.next_trigger_at, Some(t("2026-11-01T12:30:00Z")));
    // Once the run has finished, the next tick fires again.
    env.drain().await;
    env.clock.set(t("2026-11-01T12:30:00Z"));
    assert_eq!(env.client.fire_due_schedules().await.unwrap().runs.len(), 1);
}

#[tokio::test]
async fn a_one_shot_fires_once_and_disables_itself() {
    let env = TestEnv::new();
    let s = env
        .client
        .create_schedule(ScheduleRequest::once(
            "echo",
            json!({"message": "hi"}),
            "2026-11-01T07:30:00-05:00",
        ))
        .await
        .unwrap();
    assert_eq!(s.schedule_type, "oneshot");
    assert_eq!(s.next_trigger_at, Some(t("2026-11-01T12:30:00Z")));
    env.clock.set(t("2026-11-01T12:29:59Z"));
    assert_eq!(env.client.fire_due_schedules().await.unwrap().runs.len(), 0);
    env.clock.set(t("2026-11-01T12:30:00Z"));
    assert_eq!(env.client.fire_due_schedules().await.unwrap().runs.len(), 1);
    env.clock.advance(Span::days(2));
    assert_eq!(env.client.fire_due_schedules().await.unwrap().runs.len(), 0);
    let s = env.client.get_schedule(&s.id).await.unwrap();
    assert!(!s.schedule.enabled);
    assert_eq!(s.schedule.next_trigger_at, None);
    assert_eq!(s.schedule.trigger_count, 1);
    assert!(s.next_fires.is_empty());
    let e = env
        .client
        .enable_schedule(&s.schedule.id)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("time has passed"), "{e}");
    assert_eq!(env.count("SELECT count(*) FROM runs"), 1);
}

#[tokio::test]
async fn cancel_and_enable() {
    let env = TestEnv::new();
    let s = env.client.create_schedule(every_ten()).await.unwrap();
    let c = env.client.cancel_schedule(&s.id).await.unwrap();
    assert!(!c.enabled && c.cancelled_at.is_some() && c.next_trigger_at.is_none());
    assert!(env.client.cancel_schedule(&s.id).await.is_err());
    env.clock.set(t("2026-11-01T15:05:00Z"));
    assert_eq!(env.client.fire_due_schedules().await.unwrap().runs.len(), 0);
    let e = env.client.enable_schedule(&s.id).await.unwrap();
    // Ticks while it was cancelled are not caught up.
    assert_eq!(e.next_trigger_at, Some(t("2026-11-01T15:10:00Z")));
    assert!(env.client.enable_schedule(&s.id).await.is_err());
    let listed = env.client.list_schedules(Some("default")).await.unwrap();
    assert_eq!(listed.len(), 1);
}

#[tokio::test]
async fn bad_schedules_write_nothing() {
    let env = TestEnv::new();
    let cases: Vec<(ScheduleRequest, &str)> = vec![
        (
            ScheduleRequest::cron("echo", json!({"message": "hi"}), "61 * * * *"),
            "cron \"61 * * * *\": minute 61 is outside 0-59",
        ),
        (
            ScheduleRequest::cron("echo", json!({"message": "hi"}), "0 9 * * *")
                .timezone("Mars/Base"),
            "unknown time zone \"Mars/Base\"",
        ),
        (
            ScheduleRequest::once("echo", json!({"message": "hi"}), "2026-11-01T11:00:00Z"),
            "is in the past",
        ),
        (
            ScheduleRequest::once("echo", json!({"message": "hi"}), "2026-12-01T11:00:00"),
            "has no UTC offset",
        ),
        (
            ScheduleRequest::new(
                "echo",
                json!({}),
                Some("* * * * *".into()),
                Some("2026-12-01T11:00:00Z".into()),
            ),
            "must not include both cron_expression and scheduled_at",
        ),
        (
            ScheduleRequest::new("echo", json!({"message": "hi"}), None, None),
            "must include exactly one of cron_expression",
        ),
        (
            ScheduleRequest::cron("echo", json!({"message": "hi"}), "0 0 31 2 *"),
            "never fires in the next 5 years",
        ),
        (
            ScheduleRequest::cron("nope", json!({}), "* * * * *"),
            "tool \"nope\"",
        ),
        (
            ScheduleRequest::cron("add", json!({"a": 1}), "* * * * *"),
            "\"b\"",
        ),
    ];
    for (req, want) in cases {
        let e = env.client.create_schedule(req).await.unwrap_err();
        assert!(e.to_string().contains(want), "{e} should contain {want}");
        assert_eq!(e.exit_code(), 2, "{e}");
    }
    assert_eq!(env.count("SELECT count(*) FROM schedules"), 0);
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
}

#[tokio::test]
async fn active_schedules_per_session_are_limited() {
    let env = TestEnv::with_config(|c| c.sessions.max_active_schedules = 2);
    let a = env.client.create_schedule(every_ten()).await.unwrap();
    env.client.create_schedule(every_ten()).await.unwrap();
    let e = env.client.create_schedule(every_ten()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "Maximum 2 active schedules per session. Cancel an existing schedule first."
    );
    // Another session has its own budget.
    env.client
        .create_schedule(every_ten().session("other"))
        .await
        .unwrap();
    env.client.cancel_schedule(&a.id).await.unwrap();
    env.client.create_schedule(every_ten()).await.unwrap();
    assert!(env.client.enable_schedule(&a.id).await.is_err());
    assert_eq!(env.count("SELECT count(*) FROM schedules"), 4);
}
