//! Flow control: pauses and per-tool limits.

use toolq::flow::{Pause, PauseScope, Rate, ToolLimit};

use super::*;
use crate::support::TestEnv;

fn pause(env: &TestEnv, scope: PauseScope, reason: &str) -> Pause {
    Pause {
        scope,
        since: now(env),
        by: Some("ops".into()),
        reason: Some(reason.into()),
    }
}

#[tokio::test]
async fn pause_set_keeps_an_existing_pause_and_claims_skip_it() {
    let env = TestEnv::new();
    queued(&env, "s1").await;
    let tool = || PauseScope::Tool(TOOL.into());
    assert!(
        engine(&env)
            .pause_set(pause(&env, tool(), "first"))
            .await
            .unwrap()
    );
    env.clock.advance(secs(5));
    assert!(
        !engine(&env)
            .pause_set(pause(&env, tool(), "second"))
            .await
            .unwrap()
    );
    let kept = engine(&env).pause_list().await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].reason.as_deref(), kept[0].since),
        (Some("first"), now(&env) - secs(5))
    );
    // What it covers is neither claimed nor pending, on any worker.
    assert!(claim(&env, "wk_a", 5).await.is_empty());
    let tools: std::sync::Arc<[String]> = vec![TOOL.to_string()].into();
    assert!(!engine(&env).run_pending(now(&env), tools).await.unwrap());
    // A session pause covers only that session.
    let env = TestEnv::new();
    queued(&env, "s1").await;
    let s2 = queued(&env, "s2").await;
    engine(&env)
        .pause_set(pause(&env, PauseScope::Session("s1".into()), "quiet"))
        .await
        .unwrap();
    let got = claim(&env, "wk_a", 5).await;
    assert_eq!(got.iter().map(|r| &r.id).collect::<Vec<_>>(), [&s2]);
    // All covers everything.
    queued(&env, "s2").await;
    engine(&env)
        .pause_set(pause(&env, PauseScope::All, "stop"))
        .await
        .unwrap();
    assert!(claim(&env, "wk_a", 5).await.is_empty());
}

#[tokio::test]
async fn pause_clear_returns_the_pause_it_lifted() {
    let env = TestEnv::new();
    queued(&env, "s1").await;
    let set = pause(&env, PauseScope::All, "stop");
    engine(&env).pause_set(set.clone()).await.unwrap();
    assert_eq!(
        engine(&env).pause_clear(PauseScope::All).await.unwrap(),
        Some(set)
    );
    assert_eq!(
        engine(&env).pause_clear(PauseScope::All).await.unwrap(),
        None
    );
    assert!(engine(&env).pause_list().await.unwrap().is_empty());
    assert_eq!(claim(&env, "wk_a", 5).await.len(), 1);
}

#[tokio::test]
async fn pause_list_is_oldest_first() {
    let env = TestEnv::new();
    let scopes = [
        PauseScope::Session("s1".into()),
        PauseScope::All,
        PauseScope::Tool(TOOL.into()),
    ];
    for scope in &scopes {
        engine(&env)
            .pause_set(pause(&env, scope.clone(), "x"))
            .await
            .unwrap();
        env.clock.advance(secs(1));
    }
    let listed: Vec<PauseScope> = engine(&env)
        .pause_list()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.scope)
        .collect();
    assert_eq!(listed, scopes);
}

#[tokio::test]
async fn a_rate_limits_claims_and_the_limit_reads_agree() {
    let env = TestEnv::new();
    let rate = Rate {
        count: 2,
        window: secs(60),
    };
    for _ in 0..3 {
        queued(&env, "s1").await;
    }
    let room = engine(&env)
        .limit_room(TOOL.into(), rate, now(&env))
        .await
        .unwrap();
    assert_eq!((room.starts, room.opens_at), (2, None));
    assert_eq!(
        engine(&env)
            .limit_next_open(now(&env), vec![(TOOL.into(), rate)])
            .await
            .unwrap(),
        None
    );
    assert_eq!(engine(&env).limit_running(TOOL.into()).await.unwrap(), 0);
    let limited = |worker: &str| Claim {
        limits: one_limit(ToolLimit {
            max_running: None,
            rate: Some(rate),
        }),
        ..claim_of(&env, worker, 10)
    };
    // Never more starts than the rate allows in the window, over all workers.
    assert_eq!(claimed(&env, limited("wk_a")).await, 2);
    assert_eq!(claimed(&env, limited("wk_b")).await, 0);
    assert_eq!(engine(&env).limit_running(TOOL.into()).await.unwrap(), 2);
    assert_eq!(engine(&env).limit_running("sleep".into()).await.unwrap(), 0);
    let room = engine(&env)
        .limit_room(TOOL.into(), rate, now(&env))
        .await
        .unwrap();
    assert_eq!(room.starts, 0);
    let opens = room.opens_at.expect("a full window says when it opens");
    assert!(
        opens > now(&env) && opens <= now(&env) + secs(61),
        "{opens}"
    );
    let next = engine(&env)
        .limit_next_open(now(&env), vec![(TOOL.into(), rate)])
        .await
        .unwrap();
    assert_eq!(next, Some(opens));
    // Once the window has passed, the third starts.
    env.clock.set(opens);
    assert_eq!(claimed(&env, limited("wk_b")).await, 1);
}
