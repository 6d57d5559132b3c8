//! Worker rows, the inbox and blobs.

use serde_json::json;
use toolq::inbox::InboxPage;
use toolq::store::InboxMark;

use super::*;
use crate::support::TestEnv;

fn ids(messages: &[Message]) -> Vec<i64> {
    messages.iter().map(|m| m.id).collect()
}

/// Three messages for `session`, oldest first (their ids).
async fn three(env: &TestEnv, session: &str) -> Vec<i64> {
    for _ in 0..3 {
        cancelled(env, session).await;
    }
    ids(&messages(env, session).await)
}

async fn mark(env: &TestEnv, session: &str, ids: Vec<i64>, ack: bool) -> usize {
    let p = InboxMark {
        session: session.into(),
        ids,
        ack,
        now: now(env),
    };
    engine(env).inbox_mark(p).await.unwrap()
}

#[tokio::test]
async fn worker_rows_register_list_and_deregister() {
    let env = TestEnv::new();
    let mut a = worker_row(&env, "wk_a", "h1");
    a.tools = vec!["echo".into(), "sleep".into()];
    engine(&env).worker_register(a).await.unwrap();
    register(&env, "wk_b", "h1").await;
    let live = engine(&env).worker_list(false).await.unwrap();
    let mut listed: Vec<(&str, &Vec<String>)> =
        live.iter().map(|w| (w.id.as_str(), &w.tools)).collect();
    listed.sort();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        listed[0],
        ("wk_a", &vec!["echo".to_string(), "sleep".to_string()])
    );
    env.clock.advance(secs(1));
    engine(&env)
        .worker_deregister("wk_a".into(), now(&env), 3)
        .await
        .unwrap();
    let live = engine(&env).worker_list(false).await.unwrap();
    assert_eq!(
        live.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(),
        ["wk_b"]
    );
    let all = engine(&env).worker_list(true).await.unwrap();
    let gone = all
        .iter()
        .find(|w| w.id == "wk_a")
        .expect("stopped rows listed on request");
    assert!(gone.stopped_at.is_some());
    assert_eq!(gone.stop_reason.as_deref(), Some("exited"));
    assert_eq!(gone.busy_retries, 3);
}

#[tokio::test]
async fn worker_deregister_keeps_a_reason_already_set() {
    let env = TestEnv::new();
    register(&env, "wk_a", "contract-host").await;
    let rescue = toolq::store::Rescue {
        host: "contract-host".into(),
        boot_id: "contract-boot".into(),
        pid_namespace: "contract-ns".into(),
        now: now(&env),
        is_dead: |_, _| true,
        spare: Vec::new(),
        lease_expiry: true,
    };
    let decide: toolq::store::DecideRescue =
        std::sync::Arc::new(|run: &Run, _| lease_end(run, RunState::Failed));
    assert_eq!(
        engine(&env)
            .attempt_rescue(rescue, decide)
            .await
            .unwrap()
            .workers_died,
        1
    );
    engine(&env)
        .worker_deregister("wk_a".into(), now(&env), 0)
        .await
        .unwrap();
    let rows = engine(&env).worker_list(true).await.unwrap();
    assert_eq!(rows[0].stop_reason.as_deref(), Some("died"));
}

#[tokio::test]
async fn worker_overview_reads_workers_queue_and_schedules() {
    let env = TestEnv::new();
    register(&env, "wk_a", "h1").await;
    running(&env, "s3", "wk_a").await;
    queued(&env, "s1").await;
    let mut later = new_run(&env, "s2");
    later.run_at = now(&env) + secs(600);
    insert(&env, later).await;
    let mut other = new_run(&env, "s1");
    other.tool = "sleep".into();
    insert(&env, other).await;
    super::schedules::insert_schedule(&env, "s1", now(&env) + secs(60)).await;
    let seen = engine(&env).worker_overview(false).await.unwrap();
    assert_eq!(
        seen.workers
            .iter()
            .map(|w| w.id.as_str())
            .collect::<Vec<_>>(),
        ["wk_a"]
    );
    let mut by_tool = seen.queued_by_tool.clone();
    by_tool.sort();
    // Queued, due or not; the running run is not queued.
    assert_eq!(by_tool, [("echo".to_string(), 2), ("sleep".to_string(), 1)]);
    assert_eq!(seen.enabled_schedules, 1);
}

#[tokio::test]
async fn inbox_list_filters_after_an_id_and_unacked() {
    let env = TestEnv::new();
    let ids3 = three(&env, "s1").await;
    cancelled(&env, "s2").await;
    assert_eq!(ids3.len(), 3);
    assert!(
        ids3.windows(2).all(|w| w[0] < w[1]),
        "ids increase: {ids3:?}"
    );
    let list = |filter: InboxFilter| async {
        ids(&engine(&env).inbox_list("s1".into(), filter).await.unwrap())
    };
    let after = InboxFilter {
        after_id: ids3[0],
        limit: 100,
        ..Default::default()
    };
    assert_eq!(list(after).await, ids3[1..]);
    assert_eq!(
        list(InboxFilter {
            limit: 2,
            ..Default::default()
        })
        .await,
        ids3[..2]
    );
    mark(&env, "s1", vec![ids3[1]], true).await;
    let unacked = InboxFilter {
        unacked_only: true,
        limit: 100,
        ..Default::default()
    };
    assert_eq!(list(unacked).await, [ids3[0], ids3[2]]);
}

#[tokio::test]
async fn inbox_newest_id_is_the_largest_id_of_any_session() {
    let env = TestEnv::new();
    assert_eq!(engine(&env).inbox_newest_id().await.unwrap(), 0);
    let s1 = three(&env, "s1").await;
    assert_eq!(engine(&env).inbox_newest_id().await.unwrap(), s1[2]);
    cancelled(&env, "s2").await;
    let s2 = ids(&engine(&env)
        .inbox_list(
            "s2".into(),
            InboxFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap());
    assert_eq!(s2.len(), 1);
    assert!(s2[0] > s1[2]);
    assert_eq!(engine(&env).inbox_newest_id().await.unwrap(), s2[0]);
}

/// Within a session, ids become visible in increasing order on every engine while writers
/// commit messages of several sessions at once: a reader going forward from the last id it
/// saw in its session skips none. Across sessions that holds only where
/// `inbox_ids_in_commit_order` says so (SQLite's one writer; on Postgres each session's inbox
/// has a lock of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inbox_ids_are_in_commit_order_within_a_session_and_the_engine_says_if_across() {
    const EACH: usize = 40;
    let env = std::sync::Arc::new(TestEnv::new());
    assert_eq!(
        engine(&env).inbox_ids_in_commit_order(),
        matches!(crate::support::ENGINE, crate::support::Engine::Sqlite)
    );
    let writers: Vec<_> = ["s1", "s2", "s1", "s2"]
        .into_iter()
        .map(|session| {
            let env = env.clone();
            tokio::spawn(async move {
                for _ in 0..EACH {
                    cancelled(&env, session).await;
                }
            })
        })
        .collect();
    // One reader per session, each going forward from the last id it saw.
    let follow = |session: &'static str| {
        let env = env.clone();
        tokio::spawn(async move {
            let (mut seen, mut after) = (Vec::new(), 0);
            while seen.len() < 2 * EACH {
                let page = engine(&env)
                    .inbox_list(
                        session.into(),
                        InboxFilter {
                            after_id: after,
                            limit: 1000,
                            ..Default::default()
                        },
                    )
                    .await
                    .unwrap();
                if let Some(last) = page.last() {
                    after = last.id;
                }
                seen.extend(ids(&page));
                tokio::task::yield_now().await;
            }
            seen
        })
    };
    let (r1, r2) = (follow("s1"), follow("s2"));
    for writer in writers {
        writer.await.unwrap();
    }
    for (session, reader) in [("s1", r1), ("s2", r2)] {
        let seen = reader.await.unwrap();
        assert_eq!(seen, ids(&messages(&env, session).await), "{session}");
    }
}

#[tokio::test]
async fn inbox_page_is_newest_first_before_or_after_an_id() {
    let env = TestEnv::new();
    let mut all = Vec::new();
    for _ in 0..5 {
        all.push(cancelled(&env, "s1").await);
    }
    let ids5 = ids(&messages(&env, "s1").await);
    let page =
        |p: InboxPage| async { ids(&engine(&env).inbox_page("s1".into(), p).await.unwrap()) };
    let newest = page(InboxPage {
        limit: 2,
        ..Default::default()
    })
    .await;
    assert_eq!(newest, [ids5[4], ids5[3]]);
    let before = page(InboxPage {
        before_id: Some(ids5[3]),
        limit: 2,
        ..Default::default()
    })
    .await;
    assert_eq!(before, [ids5[2], ids5[1]]);
    let after = page(InboxPage {
        after_id: Some(ids5[1]),
        limit: 2,
        ..Default::default()
    })
    .await;
    assert_eq!(after, [ids5[3], ids5[2]]);
    assert!(
        page(InboxPage {
            limit: 10,
            ..Default::default()
        })
        .await
        .len()
            == 5
    );
    let _ = all;
}

#[tokio::test]
async fn inbox_of_run_is_oldest_first() {
    let env = TestEnv::new();
    let mut run = new_run(&env, "s1");
    let request = NewMessage {
        session_id: "s1".into(),
        run_id: run.id.to_string(),
        attempt: 0,
        kind: "approval_request",
        body: "approve?".into(),
        data: json!({}),
        delivery: Delivery::WhenIdle,
    };
    run.approval = Some(toolq::run::PendingApproval {
        deadline: None,
        message: request,
        message_data: "{}".into(),
    });
    let id = insert(&env, run).await;
    cancelled(&env, "s1").await; // another run's message
    let awaiting = get(&env, &id).await;
    end(&env, vec![waiting_end(&awaiting, RunState::Cancelled)]).await;
    let about = engine(&env).inbox_of_run(id.clone(), 10).await.unwrap();
    assert_eq!(
        about.iter().map(|m| m.kind.as_str()).collect::<Vec<_>>(),
        ["approval_request", "cancelled"]
    );
    assert!(
        about
            .iter()
            .all(|m| m.run_id.as_deref() == Some(id.as_str()))
    );
    let first = engine(&env).inbox_of_run(id, 1).await.unwrap();
    assert_eq!(first[0].kind, "approval_request");
}

#[tokio::test]
async fn inbox_deliverable_returns_the_sessions_unacked_of_the_modes() {
    let env = TestEnv::new();
    let ids3 = three(&env, "s1").await;
    cancelled(&env, "s2").await;
    // A silent message: not of the modes asked for.
    let run = get(&env, &queued(&env, "s1").await).await;
    let mut silent = waiting_end(&run, RunState::Cancelled);
    if let Some(m) = silent.message.as_mut() {
        m.delivery = Delivery::Silent;
    }
    end(&env, vec![silent]).await;
    mark(&env, "s1", vec![ids3[0]], true).await;
    let modes: &'static [&'static str] = &["interrupt", "when_idle"];
    let got = engine(&env)
        .inbox_deliverable("s1".into(), modes, 10)
        .await
        .unwrap();
    assert_eq!(ids(&got), ids3[1..]);
    let got = engine(&env)
        .inbox_deliverable("s1".into(), modes, 1)
        .await
        .unwrap();
    assert_eq!(ids(&got), [ids3[1]]);
    assert!(
        engine(&env)
            .inbox_deliverable("s1".into(), &["interrupt"], 10)
            .await
            .unwrap()
            .is_empty()
    );
    // It only reads: the silent message stays unacknowledged until the host marks it.
    let all = messages(&env, "s1").await;
    assert_eq!(all.iter().filter(|m| m.acked_at.is_none()).count(), 3);
}

#[tokio::test]
async fn inbox_mark_touches_only_the_sessions_own_messages() {
    let env = TestEnv::new();
    let mine = three(&env, "s1").await;
    cancelled(&env, "s2").await;
    let theirs = ids(&messages(&env, "s2").await);
    assert_eq!(mark(&env, "s1", vec![mine[0], theirs[0]], false).await, 1);
    let s1 = messages(&env, "s1").await;
    assert!(s1[0].read_at.is_some() && s1[0].acked_at.is_none());
    assert!(
        messages(&env, "s2").await[0].read_at.is_none(),
        "another session's message"
    );
    // Ack implies read.
    assert_eq!(mark(&env, "s1", vec![mine[1], theirs[0]], true).await, 1);
    let s1 = messages(&env, "s1").await;
    assert!(s1[1].read_at.is_some() && s1[1].acked_at.is_some());
    let s2 = messages(&env, "s2").await;
    assert!(s2[0].read_at.is_none() && s2[0].acked_at.is_none());
}

#[tokio::test]
async fn blob_get_returns_the_bytes_and_truncated_flag_of_the_session() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    let mut record = lease_end(&run, RunState::Completed);
    record.log = Some((vec![0, 159, 146, 150, b'x'], true));
    end(&env, vec![record]).await;
    let log = engine(&env)
        .blob_get("s1".into(), run.log_path())
        .await
        .unwrap()
        .expect("the log");
    assert_eq!(
        (log.content, log.truncated),
        (vec![0, 159, 146, 150, b'x'], true)
    );
    let result = engine(&env)
        .blob_get("s1".into(), run.result_path())
        .await
        .unwrap()
        .expect("the result");
    assert!(!result.truncated);
    assert!(
        engine(&env)
            .blob_get("s2".into(), run.log_path())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        engine(&env)
            .blob_get("s1".into(), "/nothing".into())
            .await
            .unwrap()
            .is_none()
    );
}
