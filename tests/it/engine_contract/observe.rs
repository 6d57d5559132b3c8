//! Retention, observation and engine upkeep.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use toolq::store::{PruneBatch, PruneCutoffs, PruneStep, Removed, RunsCursor};

use super::*;
use crate::support::{ENGINE, Engine as Which, TestEnv};

pub(crate) fn cutoffs(before: DateTime<Utc>) -> PruneCutoffs {
    PruneCutoffs {
        runs_before: before,
        failed_runs_before: before,
        cancelled_runs_before: before,
        unacked_runs_before: before,
        acked_inbox_before: before,
        occurrences_before: before,
        workers_before: before,
        batches_before: before,
    }
}

/// Runs every prune step to its end, as a prune does; what went.
pub(crate) async fn prune(env: &TestEnv, cutoffs: &PruneCutoffs) -> Removed {
    let mut removed = Removed::default();
    for step in [
        PruneStep::Runs,
        PruneStep::AckedInbox,
        PruneStep::Occurrences,
        PruneStep::Workers,
        PruneStep::Batches,
    ] {
        let mut cursor = RunsCursor::default();
        for _ in 0..20 {
            let p = PruneBatch {
                step,
                cutoffs: cutoffs.clone(),
                batch: 100,
                cursor: cursor.clone(),
            };
            let (got, next) = engine(env).prune_batch(p).await.unwrap();
            removed.add(&got);
            let done = got.total() == 0 && next == cursor;
            cursor = next;
            if done || step != PruneStep::Runs {
                break;
            }
        }
    }
    removed
}

#[tokio::test]
async fn prune_removes_only_old_finished_runs_and_what_belongs_to_them() {
    let env = TestEnv::new();
    // Old: a finished run (result, log, acknowledged message), a stopped worker, a tick.
    let old = running(&env, "s1", "wk_a").await;
    end(&env, vec![lease_end(&old, RunState::Completed)]).await;
    let ids: Vec<i64> = messages(&env, "s1").await.iter().map(|m| m.id).collect();
    let p = toolq::store::InboxMark {
        session: "s1".into(),
        ids,
        ack: true,
        now: now(&env),
    };
    engine(&env).inbox_mark(p).await.unwrap();
    let waiting = queued(&env, "s1").await;
    register(&env, "wk_old", "h1").await;
    engine(&env)
        .worker_deregister("wk_old".into(), now(&env), 0)
        .await
        .unwrap();
    // Two old ticks of a schedule: the older ledger row goes, the latest stays.
    let schedule = super::schedules::insert_schedule(&env, "s2", now(&env)).await;
    for _ in 0..2 {
        let due = toolq::store::ClaimDue {
            now: now(&env),
            limit: 10,
            late_after: secs(30),
            catchup_spacing: secs(1),
        };
        let report = engine(&env)
            .schedule_claim_due(due, Arc::new(|_, _| None))
            .await
            .unwrap();
        assert_eq!(report.runs.len(), 1);
        env.clock.advance(secs(60));
    }
    env.clock.advance(secs(10 * 86_400));
    // New: a recent finished run and a live worker.
    let recent = cancelled(&env, "s1").await;
    register(&env, "wk_live", "h1").await;
    let cut = cutoffs(now(&env) - secs(86_400));
    let counted = engine(&env).prune_count(cut.clone()).await.unwrap();
    let counts = (counted.runs, counted.workers, counted.occurrences);
    assert_eq!(counts, (1, 1, 1), "{counted:?}");
    assert!(counted.blobs >= 2 && counted.inbox >= 1, "{counted:?}");
    let removed = prune(&env, &cut).await;
    assert_eq!(
        removed, counted,
        "the dry run counts what the prune removes"
    );
    assert!(
        engine(&env)
            .run_get(old.id.clone())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        engine(&env)
            .blob_get("s1".into(), old.result_path())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        engine(&env)
            .inbox_of_run(old.id.clone(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Unfinished runs stay however old; recent ones stay; live workers stay.
    assert_eq!(get(&env, &waiting).await.state, RunState::Queued);
    assert_eq!(messages_of(&env, &recent).await, 1);
    let workers = engine(&env).worker_list(true).await.unwrap();
    assert_eq!(
        workers.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(),
        ["wk_live"]
    );
    let ledger = engine(&env)
        .schedule_occurrences(schedule, 10)
        .await
        .unwrap();
    assert_eq!(ledger.len(), 1, "each schedule keeps its latest occurrence");
    assert_eq!(ledger[0].fire_at, now(&env) - secs(10 * 86_400 + 60));
    assert_eq!(prune(&env, &cut).await.total(), 0, "nothing left to prune");
}

#[tokio::test]
async fn stats_and_gauges_count_runs_by_state() {
    let env = TestEnv::new();
    // Busy retries come from heartbeats and the deregistration.
    register(&env, "wk_a", "h1").await;
    let beat = toolq::store::Heartbeat {
        worker: "wk_a".into(),
        held: Vec::new(),
        now: now(&env),
        until: now(&env) + secs(30),
        last_poll: None,
        busy_retries: 2,
    };
    engine(&env).attempt_heartbeat(beat).await.unwrap();
    register(&env, "wk_gone", "h1").await;
    engine(&env)
        .worker_deregister("wk_gone".into(), now(&env), 5)
        .await
        .unwrap();
    running(&env, "s1", "wk_a").await;
    env.clock.advance(secs(5));
    queued(&env, "s1").await;
    queued(&env, "s1").await;
    cancelled(&env, "s2").await;
    let sorted = |mut v: Vec<(String, i64)>| {
        v.sort();
        v
    };
    let want: Vec<(String, i64)> = [("cancelled", 1), ("queued", 2), ("running", 1)]
        .iter()
        .map(|(s, n)| (s.to_string(), *n))
        .collect();
    let stats = engine(&env).stats_read(now(&env)).await.unwrap();
    assert_eq!(sorted(stats.by_state), want);
    assert_eq!(stats.live_workers, 1);
    assert_eq!(
        stats.busy_retries, 7,
        "summed over every worker row, stopped ones too"
    );
    assert!(stats.oldest_queued.is_some());
    let gauges = engine(&env).gauges_read(now(&env)).await.unwrap();
    let by_state: Vec<(String, i64)> = sorted(gauges.by_state)
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(by_state, want);
    let depth = gauges
        .queue_depth
        .iter()
        .find(|d| d.session_id == "s1" && d.tool == TOOL)
        .expect("s1's depth");
    assert_eq!(
        (depth.queued, depth.awaiting_approval, depth.running),
        (2, 0, 1)
    );
    assert_eq!(gauges.schedule_lag_secs, 0.0);
}

#[tokio::test]
async fn check_finds_nothing_on_healthy_data() {
    let env = TestEnv::new();
    running(&env, "s1", "wk_a").await;
    cancelled(&env, "s1").await;
    for quick in [true, false] {
        match ENGINE {
            Which::Sqlite => assert_eq!(
                engine(&env).check(quick).await.unwrap(),
                Vec::<String>::new()
            ),
            // Postgres leaves integrity checks to the server's own tools, and says so.
            Which::Postgres => {
                let err = engine(&env).check(quick).await.unwrap_err();
                assert!(
                    matches!(err, toolq::error::StoreError::Unsupported { .. }),
                    "{err:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn info_and_process_counters_describe_the_engine() {
    let env = TestEnv::new();
    let info = engine(&env).info().await.unwrap();
    let before = engine(&env).write_stats().transactions;
    queued(&env, "s1").await;
    let after = engine(&env).write_stats();
    assert!(
        after.transactions > before,
        "a write counts: {before} then {after:?}"
    );
    assert!(after.statement_secs >= 0.0 && after.commit_secs >= 0.0);
    let location = engine(&env).location();
    let _ = engine(&env).busy_retries();
    match ENGINE {
        Which::Sqlite => {
            assert_eq!(info.engine, "sqlite");
            assert!(!info.sqlite_version.is_empty());
            assert_eq!(info.journal_mode, "wal");
            assert!(location.ends_with("toolq.db"), "{location}");
            assert!(engine(&env).size_bytes().is_some_and(|n| n > 0));
        }
        Which::Postgres => {
            assert_eq!(info.engine, "postgres");
            assert!(info.server_version.is_some());
            assert!(!location.is_empty());
            assert_eq!(engine(&env).size_bytes(), None);
        }
    }
}

#[tokio::test]
async fn upkeep_reports_the_log_or_zeros() {
    let env = TestEnv::new();
    queued(&env, "s1").await;
    let health = engine(&env).wal_health(1_000_000).await.unwrap();
    assert!(health.warning.is_none());
    let passive = engine(&env).checkpoint(false).await.unwrap();
    assert!(!passive.checkpoint.busy);
    match ENGINE {
        Which::Sqlite => {
            assert_eq!(passive.mode, toolq::store::CheckpointMode::Passive);
            let idle = engine(&env).checkpoint(true).await.unwrap();
            assert_eq!(idle.mode, toolq::store::CheckpointMode::Truncate);
            assert_eq!(
                (idle.wal_bytes, engine(&env).wal_bytes()),
                (0, 0),
                "truncated when idle"
            );
        }
        Which::Postgres => {
            assert_eq!((health.wal_bytes, health.checkpoint.backlog()), (0, 0));
            assert_eq!((passive.wal_bytes, engine(&env).wal_bytes()), (0, 0));
            engine(&env).checkpoint(true).await.unwrap();
        }
    }
}

/// The two feeds of the contract.
#[derive(Clone, Copy)]
enum Feed {
    /// `change_feed`, after any commit (here: a run's insert).
    Changes,
    /// `message_feed`, after an inbox message commits (here: a cancelled run's end).
    Messages,
}

/// Runs `feed` on a client of its own (its engine is 'static) and commits until it calls
/// back, failing after 20 s; then it must return once stopped.
async fn assert_calls_back(env: &TestEnv, feed: Feed) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let on_change: toolq::store::OnChange = Arc::new(move || {
        seen.fetch_add(1, Ordering::SeqCst);
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let registry = toolq::RegistryBuilder::new()
        .with_builtins()
        .build()
        .unwrap();
    let watcher = toolq::Client::open(env.db.config(), registry).unwrap();
    let task = {
        let stop = stop.clone();
        tokio::spawn(async move {
            match feed {
                Feed::Changes => watcher.engine().change_feed(on_change, stop).await,
                Feed::Messages => watcher.engine().message_feed(on_change, stop).await,
            }
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let start = calls.load(Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while calls.load(Ordering::SeqCst) == start {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no call after a commit"
        );
        match feed {
            Feed::Changes => {
                queued(env, "s1").await;
            }
            Feed::Messages => {
                cancelled(env, "s1").await;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    stop.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .expect("the feed returns once stopped")
        .unwrap();
}

#[tokio::test]
async fn change_feed_calls_back_after_another_connection_commits() {
    assert_calls_back(&TestEnv::new(), Feed::Changes).await;
}

#[tokio::test]
async fn message_feed_calls_back_after_an_inbox_message_commits() {
    assert_calls_back(&TestEnv::new(), Feed::Messages).await;
}
