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
            EnqueueRequest::new("echo", json!({"message": "hi"})),
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
            EnqueueRequest::new("echo", json!({"message": "plain"})),
            keyed("second"),
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
    assert_eq!(plain.args, json!({"message": "plain"}));
    assert_eq!(plain.run_at, plain.created_at);
}
