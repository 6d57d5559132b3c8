use serde_json::json;
use toolq::EnqueueRequest;

use crate::support::TestEnv;

#[tokio::test]
async fn bad_requests_write_nothing() {
    let env = TestEnv::new();
    let e = env
        .client
        .enqueue(EnqueueRequest::new("nope", json!({})))
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("\"nope\""), "{e}");
    let e = env
        .client
        .enqueue(EnqueueRequest::new("add", json!({"a": 1})))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("\"b\""), "{e}");
    let e = env
        .client
        .enqueue_batch(vec![
            EnqueueRequest::new("echo", json!({})),
            EnqueueRequest::new("echo", json!({"message": 5})),
        ])
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("request 2: "), "{e}");
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
}

#[tokio::test]
async fn idempotency_key_returns_the_existing_run() {
    let env = TestEnv::new();
    let mut req = EnqueueRequest::new("echo", json!({"message": "a"}));
    req.idempotency_key = Some("k1".into());
    let a = env.client.enqueue(req.clone()).await.unwrap();
    let b = env.client.enqueue(req).await.unwrap();
    assert!(a.created && !b.created);
    assert_eq!(a.run_id, b.run_id);
    assert_eq!(env.count("SELECT count(*) FROM runs"), 1);
}

#[tokio::test]
async fn a_batch_inserts_in_order_and_a_repeated_key_within_it_returns_the_first_run() {
    let env = TestEnv::new();
    let keyed = |m: &str| {
        let mut req = EnqueueRequest::new("echo", json!({"message": m}));
        req.idempotency_key = Some("same".into());
        req
    };
    let out = env
        .client
        .enqueue_batch(vec![
            keyed("first"),
            EnqueueRequest::new("echo", json!({"message": "plain", "n": [1, 2]})),
            keyed("first"),
        ])
        .await
        .unwrap();
    assert_eq!(out.len(), 3);
    assert!(out[0].created && out[1].created && !out[2].created);
    assert_eq!(out[0].run_id, out[2].run_id);
    assert_eq!(env.count("SELECT count(*) FROM runs"), 2);
    let first = env.client.get(&out[0].run_id).await.unwrap();
    assert_eq!(first.args, json!({"message": "first"}));
    let plain = env.client.get(&out[1].run_id).await.unwrap();
    assert_eq!(plain.args, json!({"message": "plain", "n": [1, 2]}));
    assert_eq!(plain.run_at, plain.created_at);
}

/// The same key with other args is almost always a caller's bug: an error (exit 2) that names
/// the key and the run holding it, and nothing is written, also within a batch.
#[tokio::test]
async fn the_same_idempotency_key_with_other_args_is_an_error_naming_both() {
    let env = TestEnv::new();
    let keyed = |m: &str| {
        let mut req = EnqueueRequest::new("echo", json!({"message": m}));
        req.idempotency_key = Some("k".into());
        req
    };
    let first = env.client.enqueue(keyed("a")).await.unwrap().run_id;
    let e = env.client.enqueue(keyed("b")).await.unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("idempotency key \"k\"")
            && text.contains(&format!("already names run {first} with different args")),
        "{text}"
    );
    let e = env
        .client
        .enqueue_batch(vec![
            EnqueueRequest::new("echo", json!({})),
            keyed("a"),
            keyed("c"),
        ])
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("request 3: "), "{e}");
    assert_eq!(e.exit_code(), 2);
    assert_eq!(
        env.count("SELECT count(*) FROM runs"),
        1,
        "the batch wrote nothing"
    );
    // The same tool and args (keys in any order) is still the same run.
    let mut same = EnqueueRequest::new("echo", json!({"message": "a"}));
    same.idempotency_key = Some("k".into());
    assert_eq!(env.client.enqueue(same).await.unwrap().run_id, first);
}
