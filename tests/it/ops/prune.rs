//! Retention: prune removes old finished work in batches and keeps what it must.

use std::time::Duration;

use serde_json::json;
use toolq::inbox::InboxFilter;
use toolq::retention::PruneOptions;
use toolq::store::Removed;
use toolq::{Clock, EnqueueRequest, RunId, RunState};

use crate::support::TestEnv;

const TABLES: [&str; 5] = ["runs", "blobs", "inbox", "schedule_occurrences", "workers"];

fn counts(env: &TestEnv) -> Vec<i64> {
    TABLES
        .iter()
        .map(|t| env.count(&format!("SELECT count(*) FROM {t}")))
        .collect()
}

async fn echo(env: &TestEnv, title: &str) -> RunId {
    env.client
        .enqueue(EnqueueRequest::new("echo", json!({"message": title})).title(title))
        .await
        .unwrap()
        .run_id
}

async fn ack_all_but(env: &TestEnv, keep_unacked: &[&RunId]) {
    let msgs = env
        .client
        .inbox(
            "default",
            InboxFilter {
                limit: 1000,
                unacked_only: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let ids: Vec<i64> = msgs
        .iter()
        .filter(|m| {
            !keep_unacked
                .iter()
                .any(|k| m.run_id.as_deref() == Some(k.as_str()))
        })
        .map(|m| m.id)
        .collect();
    env.client.mark_inbox("default", ids, true).await.unwrap();
}

fn ts(t: chrono::DateTime<chrono::Utc>) -> String {
    toolq::store::codec::ts(t)
}

#[tokio::test]
async fn prune_removes_old_finished_work_and_keeps_what_it_must() {
    let env = TestEnv::with_config(|c| c.retention.batch_size = 2);
    let t0 = env.clock.now();
    // Finished at t0: one acknowledged, one whose message is still unread, three runs of an
    // enabled schedule, one run a recent occurrence points at.
    let acked = echo(&env, "acked").await;
    let unacked = echo(&env, "unacked").await;
    let s1 = echo(&env, "sched 1").await;
    let s2 = echo(&env, "sched 2").await;
    let s3 = echo(&env, "sched 3").await;
    let linked = echo(&env, "linked").await;
    // Unfinished: queued for much later, and (below) one made running by hand.
    let mut later = EnqueueRequest::new("echo", json!({"message": "hi"}));
    later.run_at = Some(t0 + chrono::Duration::days(100));
    let queued = env.client.enqueue(later).await.unwrap().run_id;
    let mut later = EnqueueRequest::new("echo", json!({"message": "hi"}));
    later.run_at = Some(t0 + chrono::Duration::days(100));
    let running = env.client.enqueue(later).await.unwrap().run_id;
    env.drain().await;
    ack_all_but(&env, &[&unacked]).await;

    for (id, title) in [("sch_on", "on"), ("sch_off", "off")] {
        env.db.exec(&format!(
            "INSERT INTO schedules (id, session_id, tool, args, title, cron_expression, enabled, \
             next_trigger_at, created_at, updated_at) \
             VALUES ('{id}', 'default', 'echo', '{{}}', '{title}', '0 * * * *', {}, '{}', \
             '{created}', '{created}')",
            (id == "sch_on") as i64,
            ts(t0 + chrono::Duration::days(9)),
            created = ts(t0 - chrono::Duration::days(60))
        ));
    }
    for (run, hours) in [(&s1, 3), (&s2, 2), (&s3, 1)] {
        env.db.exec(&format!(
            "UPDATE runs SET schedule_id = 'sch_on', fire_at = '{}' WHERE id = '{}'",
            ts(t0 - chrono::Duration::hours(hours)),
            run.as_str()
        ));
    }
    // Now is t0 + 8 days: runs finished at t0 are past the 7-day retention.
    env.clock.advance(chrono::Duration::days(8));
    let now = env.clock.now();
    let recent = echo(&env, "recent").await;
    env.drain().await;
    ack_all_but(&env, &[&unacked]).await;
    // Made running by hand after the drains (a worker elsewhere holds it), long ago.
    env.db.exec(&format!(
        "UPDATE runs SET state = 'running', attempt = 1, lease_owner = 'wk_x', lease_token = 't', \
         lease_expires_at = '{}', started_at = '{}' WHERE id = '{}'",
        ts(now + chrono::Duration::days(1)),
        ts(t0),
        running.as_str()
    ));
    for (sched, fire, run) in [
        ("sch_on", now - chrono::Duration::days(40), None),
        ("sch_on", now - chrono::Duration::days(35), None),
        (
            "sch_on",
            now - chrono::Duration::days(1),
            Some(linked.as_str()),
        ),
        ("sch_off", now - chrono::Duration::days(40), None),
    ] {
        env.db.exec(&format!(
            "INSERT INTO schedule_occurrences (schedule_id, fire_at, outcome, run_id, recorded_at) \
             VALUES ('{sched}', '{fire}', 'fired', {}, '{fire}')",
            run.map_or("NULL".into(), |r| format!("'{r}'")),
            fire = ts(fire)
        ));
    }
    let blobs_of = |ids: &[&RunId]| -> u64 {
        ids.iter()
            .map(|id| {
                env.db.count(&format!(
                    "SELECT count(*) FROM blobs WHERE run_id = '{}'",
                    id.as_str()
                )) as u64
            })
            .sum()
    };
    let gone = [&acked, &s1, &s2];
    let expected = Removed {
        runs: 3,
        runs_completed: 3,
        runs_failed: 0,
        runs_cancelled: 0,
        blobs: blobs_of(&gone),
        // The 3 runs' messages, plus the acknowledged messages of two kept runs (s3, linked).
        inbox: 5,
        // sch_on's two old ticks; sch_off keeps its only (latest) one.
        occurrences: 2,
        // The first drain's worker row (stopped at t0); the second one stopped just now.
        workers: 1,
        batches: 0,
    };
    assert!(
        expected.blobs >= 3,
        "each echo run left a result (its empty log is no row)"
    );

    let before = counts(&env);
    let dry = env
        .client
        .prune(PruneOptions {
            dry_run: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(dry.dry_run);
    assert_eq!(dry.removed, expected, "dry run counts");
    assert_eq!(counts(&env), before, "a dry run deletes nothing");

    let report = env.client.prune(PruneOptions::default()).await.unwrap();
    assert_eq!(report.removed, expected);
    assert!(
        report.batches > 3,
        "batch_size 2 must split the work into several transactions: {}",
        report.batches
    );
    let after = counts(&env);
    let removed = [
        expected.runs,
        expected.blobs,
        expected.inbox,
        expected.occurrences,
        expected.workers,
    ];
    for (i, t) in TABLES.iter().enumerate() {
        assert_eq!(after[i], before[i] - removed[i] as i64, "table {t}");
    }
    for id in gone {
        assert!(env.client.get(id).await.is_err(), "{id} should be gone");
    }
    assert_eq!(blobs_of(&gone), 0);
    // Kept: the unread one, the schedule's latest, the linked one, the recent one, unfinished.
    for id in [&unacked, &s3, &linked, &recent] {
        let r = env.client.get(id).await.unwrap();
        assert_eq!(r.state, RunState::Completed, "{id}");
        assert!(
            env.client.result(&r).await.unwrap().is_some(),
            "{id} result"
        );
    }
    assert_eq!(
        env.client.get(&queued).await.unwrap().state,
        RunState::Queued
    );
    assert_eq!(
        env.client.get(&running).await.unwrap().state,
        RunState::Running
    );
    let unread = env
        .client
        .inbox(
            "default",
            InboxFilter {
                limit: 100,
                unacked_only: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(unread.len(), 1);
    assert_eq!(unread[0].run_id.as_deref(), Some(unacked.as_str()));
    // The recent run's acknowledged message stays (acknowledged just now).
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM inbox WHERE run_id = '{}'",
            recent.as_str()
        )),
        1
    );
    // A second prune finds nothing.
    let again = env.client.prune(PruneOptions::default()).await.unwrap();
    assert_eq!(again.removed, Removed::default());
}

#[tokio::test]
async fn older_than_overrides_the_configured_ages() {
    let env = TestEnv::new();
    let a = echo(&env, "a").await;
    env.drain().await;
    // Unacknowledged and only an hour old: kept by the defaults, removed by --older-than 30m.
    env.clock.advance(chrono::Duration::hours(1));
    let kept = env.client.prune(PruneOptions::default()).await.unwrap();
    assert_eq!(kept.removed.runs, 0);
    let report = env
        .client
        .prune(PruneOptions {
            older_than: Some(Duration::from_secs(1800)),
            dry_run: false,
        })
        .await
        .unwrap();
    assert_eq!(report.removed.runs, 1);
    assert!(env.client.get(&a).await.is_err());
    assert_eq!(env.count("SELECT count(*) FROM blobs"), 0);
    assert_eq!(env.count("SELECT count(*) FROM inbox"), 0);
}

/// Retention walks the final states one at a time, oldest finish first (`runs_final_idx`):
/// old completed, failed and cancelled runs all go, in batches smaller than each state's
/// share, and the recent run of each state stays.
#[tokio::test]
async fn prune_takes_old_runs_of_every_final_state_batch_by_batch() {
    let env = TestEnv::with_config(|c| c.retention.batch_size = 2);
    let finish_one_of_each = |tag: &'static str| {
        let env = &env;
        async move {
            let ok = echo(env, tag).await;
            let failed = env
                .client
                .enqueue(EnqueueRequest::new("divide", json!({"a": 1, "b": 0})).title(tag))
                .await
                .unwrap()
                .run_id;
            let mut later = EnqueueRequest::new("echo", json!({"message": "hi"})).title(tag);
            later.run_at = Some(env.clock.now() + chrono::Duration::days(1));
            let cancelled = env.client.enqueue(later).await.unwrap().run_id;
            env.client.cancel(&cancelled).await.unwrap();
            [ok, failed, cancelled]
        }
    };
    let mut old = Vec::new();
    for _ in 0..3 {
        old.extend(finish_one_of_each("old").await);
    }
    env.drain().await;
    ack_all_but(&env, &[]).await;
    env.clock.advance(chrono::Duration::days(8));
    let recent = finish_one_of_each("recent").await;
    env.drain().await;
    ack_all_but(&env, &[]).await;
    let states = |ids: &[RunId]| {
        let env = &env;
        let ids = ids.to_vec();
        async move {
            let mut s = Vec::new();
            for id in &ids {
                s.push(env.client.get(id).await.unwrap().state);
            }
            s
        }
    };
    assert_eq!(
        states(&recent).await,
        [RunState::Completed, RunState::Failed, RunState::Cancelled]
    );
    assert_eq!(
        states(&old[..3]).await,
        [RunState::Completed, RunState::Failed, RunState::Cancelled]
    );

    let report = env.client.prune(PruneOptions::default()).await.unwrap();
    assert_eq!(report.removed.runs, 9, "{report:?}");
    for id in &old {
        assert!(env.client.get(id).await.is_err(), "{id} should be gone");
    }
    assert_eq!(
        states(&recent).await,
        [RunState::Completed, RunState::Failed, RunState::Cancelled]
    );
    assert_eq!(env.count("SELECT count(*) FROM runs"), 3);
    let again = env.client.prune(PruneOptions::default()).await.unwrap();
    assert_eq!(again.removed, Removed::default());
}
