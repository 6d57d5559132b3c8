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
