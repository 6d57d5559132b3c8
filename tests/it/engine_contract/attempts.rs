//! Attempts: a worker's claims, settles, heartbeats, flushes and the rescue of dead owners.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;
use toolq::flow::ToolLimit;
use toolq::store::{
    DecideRescue, Flush, Heartbeat, OperationWrite, ProgressWrite, Release, Rescue, RescueReason,
    Settle, Settlement,
};

use super::*;
use crate::support::TestEnv;

#[tokio::test]
async fn attempt_claim_never_claims_a_run_twice() {
    let env = TestEnv::new();
    let mut ids = BTreeSet::new();
    for _ in 0..3 {
        ids.insert(queued(&env, "s1").await);
    }
    assert!(
        claim(&env, "wk_a", 0).await.is_empty(),
        "max 0 claims nothing"
    );
    let a = claim(&env, "wk_a", 2).await;
    let b = claim(&env, "wk_b", 5).await;
    assert_eq!((a.len(), b.len()), (2, 1));
    assert!(claim(&env, "wk_c", 5).await.is_empty());
    let claimed: BTreeSet<RunId> = a.iter().chain(&b).map(|r| r.id.clone()).collect();
    assert_eq!(claimed, ids);
    let tokens: BTreeSet<&String> = a
        .iter()
        .chain(&b)
        .filter_map(|r| r.lease_token.as_ref())
        .collect();
    assert_eq!(tokens.len(), 3, "a fresh token each");
    for (run, worker) in a
        .iter()
        .map(|r| (r, "wk_a"))
        .chain(b.iter().map(|r| (r, "wk_b")))
    {
        let stored = get(&env, &run.id).await;
        assert_eq!(stored.state, RunState::Running);
        assert_eq!(stored.attempt, 1);
        assert_eq!(stored.lease_owner.as_deref(), Some(worker));
        assert_eq!(stored.lease_token, run.lease_token);
        assert_eq!(stored.lease_expires_at, Some(now(&env) + secs(30)));
    }
    // Not due yet: not claimed.
    let mut later = new_run(&env, "s1");
    later.run_at = now(&env) + secs(60);
    insert(&env, later).await;
    assert!(claim(&env, "wk_a", 5).await.is_empty());
}

/// Four workers claiming at once never share a run (on Postgres, four connections).
#[tokio::test]
async fn attempt_claim_never_claims_a_run_twice_when_workers_race() {
    let env = TestEnv::new();
    for _ in 0..20 {
        queued(&env, "s1").await;
    }
    let (a, b, c, d) = tokio::join!(
        claim(&env, "wk_a", 10),
        claim(&env, "wk_b", 10),
        claim(&env, "wk_c", 10),
        claim(&env, "wk_d", 10),
    );
    let all: Vec<RunId> = [a, b, c, d].into_iter().flatten().map(|r| r.id).collect();
    let distinct: BTreeSet<&RunId> = all.iter().collect();
    assert_eq!((all.len(), distinct.len()), (20, 20));
}

/// Four workers claiming at once over many sessions each fill their slots: a claim locks
/// only the sessions it takes runs from, so the others take from the rest instead of
/// waiting for it and then finding its sessions empty (on Postgres, four connections).
#[tokio::test]
async fn attempt_claims_at_once_over_many_sessions_each_fill_their_slots() {
    let env = TestEnv::new();
    for i in 0..40 {
        queued(&env, &format!("s{i:02}")).await;
    }
    let (a, b, c, d) = tokio::join!(
        claim(&env, "wk_a", 10),
        claim(&env, "wk_b", 10),
        claim(&env, "wk_c", 10),
        claim(&env, "wk_d", 10),
    );
    assert_eq!((a.len(), b.len(), c.len(), d.len()), (10, 10, 10, 10));
    let distinct: BTreeSet<&RunId> = [&a, &b, &c, &d]
        .into_iter()
        .flatten()
        .map(|r| &r.id)
        .collect();
    assert_eq!(distinct.len(), 40);
}

#[tokio::test]
async fn attempt_claim_honours_per_session_over_all_workers() {
    let env = TestEnv::new();
    for _ in 0..3 {
        queued(&env, "s1").await;
    }
    queued(&env, "s2").await;
    let one_each = |worker: &str| Claim {
        per_session: 1,
        ..claim_of(&env, worker, 10)
    };
    let got = engine(&env).attempt_claim(one_each("wk_a")).await.unwrap();
    let sessions: BTreeSet<&str> = got.iter().map(|r| r.session_id.as_str()).collect();
    assert_eq!((got.len(), sessions), (2, BTreeSet::from(["s1", "s2"])));
    // Another worker: every session already runs its one.
    assert_eq!(claimed(&env, one_each("wk_b")).await, 0);
    // Slots are shared between sessions: s2's one newer run is not left behind s1's three.
    let env = TestEnv::new();
    for _ in 0..3 {
        queued(&env, "s1").await;
    }
    queued(&env, "s2").await;
    let p = Claim {
        after_session: Some("s1".into()),
        ..claim_of(&env, "wk_a", 2)
    };
    let got = engine(&env).attempt_claim(p).await.unwrap();
    let sessions: BTreeSet<&str> = got.iter().map(|r| r.session_id.as_str()).collect();
    assert_eq!(sessions, BTreeSet::from(["s1", "s2"]));
}

#[tokio::test]
async fn attempt_claim_over_many_sessions_takes_priority_then_each_sessions_first() {
    let env = TestEnv::new();
    let session = |i: usize| format!("s{i:02}");
    for i in 0..30 {
        for _ in 0..3 {
            queued(&env, &session(i)).await;
        }
    }
    // s17's best run is urgent; s03's would be, but it is not due for an hour.
    let mut urgent = new_run(&env, &session(17));
    urgent.priority = 5;
    let urgent = insert(&env, urgent).await;
    let mut later = new_run(&env, &session(3));
    later.priority = 9;
    later.run_at = now(&env) + secs(3600);
    let later = insert(&env, later).await;
    let sessions_of = |runs: &[Run]| {
        let mut n = std::collections::BTreeMap::<String, usize>::new();
        for r in runs {
            *n.entry(r.session_id.clone()).or_default() += 1;
        }
        n
    };
    let first = claim(&env, "wk_a", 5).await;
    assert_eq!(first[0].id, urgent, "{first:?}");
    assert_eq!(
        sessions_of(&first).len(),
        5,
        "one run from each of five sessions"
    );
    // 40 slots over 30 sessions: every session's first before any session's second.
    let second = claim(&env, "wk_b", 40).await;
    let per_session = sessions_of(&second);
    assert_eq!(
        (second.len(), per_session.len()),
        (40, 30),
        "{per_session:?}"
    );
    assert!(per_session.values().all(|&n| n <= 2), "{per_session:?}");
    assert!(!first.iter().chain(&second).any(|r| r.id == later));
}

#[tokio::test]
async fn attempt_claim_after_a_session_visits_the_later_ones_then_wraps_round_once() {
    let env = TestEnv::new();
    let session = |i: usize| format!("s{i:02}");
    for i in 0..10 {
        for _ in 0..2 {
            queued(&env, &session(i)).await;
        }
    }
    // s03's best run is urgent: before the cursor, reached only by wrapping round.
    let mut urgent = new_run(&env, &session(3));
    urgent.priority = 5;
    let urgent = insert(&env, urgent).await;
    let p = Claim {
        after_session: Some(session(5)),
        ..claim_of(&env, "wk_a", 10)
    };
    let got = engine(&env).attempt_claim(p).await.unwrap();
    assert_eq!(got[0].id, urgent, "{got:?}");
    // Ten slots over ten sessions: each session once, the cursor's own included, none twice.
    let mut sessions: Vec<&str> = got.iter().map(|r| r.session_id.as_str()).collect();
    sessions.sort_unstable();
    let all: Vec<String> = (0..10).map(session).collect();
    assert_eq!(sessions, all, "{got:?}");
    // 70 sessions: the claim visits at most 64 of them from the cursor on, wrapping round,
    // so a run ahead of the cursor is still found.
    let env = TestEnv::new();
    for i in 0..70 {
        queued(&env, &session(i)).await;
    }
    let mut urgent = new_run(&env, &session(2));
    urgent.priority = 5;
    let urgent = insert(&env, urgent).await;
    let p = Claim {
        after_session: Some(session(60)),
        ..claim_of(&env, "wk_a", 2)
    };
    let got = engine(&env).attempt_claim(p).await.unwrap();
    let ids: Vec<&RunId> = got.iter().map(|r| &r.id).collect();
    assert_eq!(ids.len(), 2, "{got:?}");
    assert_eq!(ids[0], &urgent, "{got:?}");
    // Then the oldest first run of the sessions visited: s00's, also past the wrap.
    assert_eq!(got[1].session_id, session(0), "{got:?}");
}

#[tokio::test]
async fn attempt_claim_takes_priority_first_and_honours_max_running() {
    let env = TestEnv::new();
    let low = queued(&env, "s1").await;
    let mut urgent = new_run(&env, "s1");
    urgent.priority = 5;
    let high = insert(&env, urgent).await;
    assert_eq!(claim(&env, "wk_a", 1).await[0].id, high);
    assert_eq!(claim(&env, "wk_a", 1).await[0].id, low);
    // max_running counts over all workers: one is running, so none more.
    let env = TestEnv::new();
    for _ in 0..3 {
        queued(&env, "s1").await;
    }
    let limited = |worker: &str| Claim {
        limits: one_limit(ToolLimit {
            max_running: Some(2),
            rate: None,
        }),
        ..claim_of(&env, worker, 10)
    };
    assert_eq!(claimed(&env, limited("wk_a")).await, 2);
    assert_eq!(claimed(&env, limited("wk_b")).await, 0);
    // Background room: at most that many background runs, the others stay queued.
    let env = TestEnv::new();
    for _ in 0..2 {
        let p = toolq::store::RunInsertLimited {
            run: new_run(&env, "s1"),
            except: None,
            limit: None,
            now: now(&env),
            approval: None,
        };
        engine(&env).run_insert_within_limit(p).await.unwrap();
    }
    let plain = queued(&env, "s1").await;
    let p = Claim {
        background_room: Some(1),
        ..claim_of(&env, "wk_a", 10)
    };
    let got = engine(&env).attempt_claim(p).await.unwrap();
    assert_eq!(got.iter().filter(|r| r.background).count(), 1, "{got:?}");
    assert!(got.iter().any(|r| r.id == plain));
}

#[tokio::test]
async fn attempt_settle_ends_releases_and_claims_fenced() {
    let env = TestEnv::new();
    queued(&env, "s1").await;
    queued(&env, "s1").await;
    let runs = claim(&env, "wk_a", 2).await;
    let (a, b) = (&runs[0], &runs[1]);
    let batch = Arc::new(vec![
        Settlement::End(Box::new(lease_end(a, RunState::Completed))),
        Settlement::Release(Release {
            id: b.id.clone(),
            attempt: b.attempt,
            token: b.lease_token.clone().unwrap(),
        }),
    ]);
    let settle = |max| Settle {
        batch: batch.clone(),
        claim: claim_of(&env, "wk_a", max),
    };
    let out = engine(&env).attempt_settle(settle(0)).await.unwrap();
    assert_eq!((out.applied, out.claimed.len()), (vec![true, true], 0));
    assert_eq!(get(&env, &a.id).await.state, RunState::Completed);
    assert_eq!(messages_of(&env, &a.id).await, 1);
    let released = get(&env, &b.id).await;
    assert_eq!((released.state, released.attempt), (RunState::Queued, 0));
    // The same batch again: both fenced out; then the replacement claim takes the released run.
    let out = engine(&env).attempt_settle(settle(5)).await.unwrap();
    assert_eq!(out.applied, [false, false]);
    assert_eq!(
        out.claimed.iter().map(|r| &r.id).collect::<Vec<_>>(),
        [&b.id]
    );
    assert_eq!(out.claimed[0].attempt, 1);
    assert_eq!(messages_of(&env, &a.id).await, 1);
}

#[tokio::test]
async fn attempt_heartbeat_extends_only_held_leases() {
    let env = TestEnv::new();
    register(&env, "wk_a", "contract-host").await;
    let run = running(&env, "s1", "wk_a").await;
    let token = run.lease_token.clone().unwrap();
    env.clock.advance(secs(10));
    let beat = |held: Vec<(String, String)>| Heartbeat {
        worker: "wk_a".into(),
        held,
        now: now(&env),
        until: now(&env) + secs(60),
        last_poll: Some(now(&env)),
        busy_retries: 0,
    };
    let id = run.id.to_string();
    let got = engine(&env)
        .attempt_heartbeat(beat(vec![(id.clone(), token.clone())]))
        .await
        .unwrap();
    assert_eq!(got, [(id.clone(), false)]);
    assert_eq!(
        get(&env, &run.id).await.lease_expires_at,
        Some(now(&env) + secs(60))
    );
    let row = engine(&env).worker_list(false).await.unwrap();
    assert!(
        row[0].last_poll_at.is_some(),
        "the worker row is updated: {row:?}"
    );
    // A wrong token is not this worker's lease: left out, not extended.
    env.clock.advance(secs(10));
    let got = engine(&env)
        .attempt_heartbeat(beat(vec![(id.clone(), "stale".into())]))
        .await
        .unwrap();
    assert!(got.is_empty());
    assert_eq!(
        get(&env, &run.id).await.lease_expires_at,
        Some(now(&env) - secs(10) + secs(60))
    );
    // A cancel request shows in the answer.
    engine(&env)
        .run_cancel_request(run.id.clone(), now(&env))
        .await
        .unwrap();
    let got = engine(&env)
        .attempt_heartbeat(beat(vec![(id.clone(), token)]))
        .await
        .unwrap();
    assert_eq!(got, [(id, true)]);
}

#[tokio::test]
async fn attempt_flush_writes_only_under_the_lease() {
    let env = TestEnv::new();
    let run = running(&env, "s1", "wk_a").await;
    let token = run.lease_token.clone().unwrap();
    let write = |token: &str, status: &str| ProgressWrite {
        id: run.id.to_string(),
        session_id: run.session_id.clone(),
        attempt: run.attempt,
        token: token.into(),
        status_text: Some(status.into()),
        progress: None,
        output_tail: Some("tail".into()),
        log: Some((b"so far".to_vec(), false)),
    };
    let operation = |token: &str| OperationWrite {
        id: run.id.to_string(),
        attempt: run.attempt,
        token: token.into(),
        operation_id: "op1".into(),
        stages: vec![json!({"stage": "one"})],
    };
    let flush = |token: &str, status: &str| Flush {
        operations: vec![operation(token)],
        progress: vec![write(token, status)],
        now: now(&env),
    };
    let out = engine(&env)
        .attempt_flush(flush(&token, "half"))
        .await
        .unwrap();
    assert_eq!((out.operations, out.progress), (vec![true], vec![true]));
    let live = get(&env, &run.id).await;
    assert_eq!(live.status_text.as_deref(), Some("half"));
    assert_eq!(live.operation_id.as_deref(), Some("op1"));
    let log = engine(&env)
        .blob_get("s1".into(), run.log_path())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(log.content, b"so far");
    let out = engine(&env)
        .attempt_flush(flush("stale", "wrong"))
        .await
        .unwrap();
    assert_eq!((out.operations, out.progress), (vec![false], vec![false]));
    assert_eq!(
        get(&env, &run.id).await.status_text.as_deref(),
        Some("half")
    );
}

/// Ends a rescued run failed, through the end-writer (fenced by its lease).
fn decide_failed() -> DecideRescue {
    Arc::new(|run: &Run, reason: RescueReason| {
        let mut record = lease_end(run, RunState::Failed);
        record.error = Some(format!("rescued: {}", reason.as_str()));
        record
    })
}

fn rescue_of(env: &TestEnv, lease_expiry: bool, spare: Vec<String>) -> Rescue {
    Rescue {
        host: "contract-host".into(),
        boot_id: "contract-boot".into(),
        pid_namespace: "contract-ns".into(),
        now: now(env),
        is_dead: |_, _| true,
        spare,
        lease_expiry,
    }
}

#[tokio::test]
async fn attempt_rescue_takes_back_runs_of_dead_owners_once() {
    let env = TestEnv::new();
    register(&env, "wk_dead", "contract-host").await;
    let run = running(&env, "s1", "wk_dead").await;
    let spared = running(&env, "s1", "wk_dead").await;
    let spare = vec![spared.id.to_string()];
    let out = engine(&env)
        .attempt_rescue(rescue_of(&env, true, spare.clone()), decide_failed())
        .await
        .unwrap();
    assert_eq!(out.workers_died, 1);
    let taken: Vec<(&RunId, RescueReason)> =
        out.runs.iter().map(|r| (&r.run.id, r.reason)).collect();
    assert_eq!(taken, [(&run.id, RescueReason::OwnerDied)]);
    let ended = get(&env, &run.id).await;
    assert_eq!(ended.state, RunState::Failed);
    assert_eq!(ended.error.as_deref(), Some("rescued: owner_died"));
    assert_eq!(messages_of(&env, &run.id).await, 1);
    assert_eq!(
        get(&env, &spared.id).await.state,
        RunState::Running,
        "spared"
    );
    let rows = engine(&env).worker_list(true).await.unwrap();
    assert_eq!(rows[0].stop_reason.as_deref(), Some("died"));
    // Again: the worker is already stopped; the spared run is now taken.
    let out = engine(&env)
        .attempt_rescue(rescue_of(&env, true, Vec::new()), decide_failed())
        .await
        .unwrap();
    assert_eq!(out.workers_died, 0);
    let taken: Vec<&RunId> = out.runs.iter().map(|r| &r.run.id).collect();
    assert_eq!(taken, [&spared.id]);
    let reason = out.runs[0].reason;
    assert!(
        matches!(reason, RescueReason::OwnerDied | RescueReason::OwnerStopped),
        "{reason:?}"
    );
    let out = engine(&env)
        .attempt_rescue(rescue_of(&env, true, Vec::new()), decide_failed())
        .await
        .unwrap();
    assert!(out.runs.is_empty());
    assert_eq!(messages_of(&env, &run.id).await, 1);
}

#[tokio::test]
async fn attempt_rescue_takes_back_expired_leases_unless_told_not_to() {
    let env = TestEnv::new();
    // A live worker on another host: only its lease can be judged.
    register(&env, "wk_far", "elsewhere").await;
    let run = running(&env, "s1", "wk_far").await;
    let orphan = running(&env, "s1", "wk_missing").await;
    let out = engine(&env)
        .attempt_rescue(rescue_of(&env, true, Vec::new()), decide_failed())
        .await
        .unwrap();
    let taken: Vec<(&RunId, RescueReason)> =
        out.runs.iter().map(|r| (&r.run.id, r.reason)).collect();
    assert_eq!(
        taken,
        [(&orphan.id, RescueReason::OwnerMissing)],
        "the lease still holds"
    );
    env.clock.advance(secs(31));
    let out = engine(&env)
        .attempt_rescue(rescue_of(&env, false, Vec::new()), decide_failed())
        .await
        .unwrap();
    assert!(
        out.runs.is_empty(),
        "lease expiry not counted: {:?}",
        out.runs
    );
    assert_eq!(out.workers_died, 0);
    let out = engine(&env)
        .attempt_rescue(rescue_of(&env, true, Vec::new()), decide_failed())
        .await
        .unwrap();
    let taken: Vec<(&RunId, RescueReason)> =
        out.runs.iter().map(|r| (&r.run.id, r.reason)).collect();
    assert_eq!(taken, [(&run.id, RescueReason::LeaseExpired)]);
    assert_eq!(get(&env, &run.id).await.state, RunState::Failed);
}
