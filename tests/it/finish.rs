use serde_json::json;
use toolq::store::inbox::InboxFilter;
use toolq::{EnqueueRequest, RunState};

use crate::support::TestEnv;

#[tokio::test]
async fn echo_completes_with_artifacts_and_inbox_message() {
    let env = TestEnv::new();
    let id = env
        .client
        .enqueue(EnqueueRequest::new("echo", json!({"message": "hi"})).session("demo"))
        .await
        .unwrap()
        .run_id;
    let report = env.drain().await;
    assert_eq!(report.recorded, 1);
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Completed);
    assert_eq!(run.attempt, 1);
    let result = env.client.result(&run).await.unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&result.content).unwrap();
    assert_eq!(
        v,
        json!({"status": "completed", "result": {"message": "hi"}})
    );
    assert!(env.client.log(&run).await.unwrap().is_some());
    let inbox = env
        .client
        .inbox(
            "demo",
            InboxFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].kind, "completed");
    assert!(
        inbox[0]
            .body
            .starts_with("Background run completed.\n- run_id: "),
        "{}",
        inbox[0].body
    );
    assert!(
        inbox[0]
            .body
            .contains(&format!("- result_path: /.background/{id}/result.json"))
    );
}

#[tokio::test]
async fn panic_is_contained_and_internal_error_is_hidden() {
    let env = TestEnv::new();
    let mut req = EnqueueRequest::new("panic", json!({}));
    req.max_attempts = Some(1);
    let p = env.client.enqueue(req).await.unwrap().run_id;
    let mut req = EnqueueRequest::new("fail", json!({}));
    req.max_attempts = Some(1);
    let f = env.client.enqueue(req).await.unwrap().run_id;
    let ok = env
        .client
        .enqueue(EnqueueRequest::new("echo", json!({})))
        .await
        .unwrap()
        .run_id;
    env.drain().await;
    let p = env.client.get(&p).await.unwrap();
    assert_eq!(p.state, RunState::Failed);
    assert_eq!(p.error.as_deref(), Some(toolq::tool::INTERNAL_ERROR_TEXT));
    assert!(p.internal_error.unwrap().contains("boom in tool"));
    let f = env.client.get(&f).await.unwrap();
    assert_eq!(f.error.as_deref(), Some(toolq::tool::INTERNAL_ERROR_TEXT));
    assert!(f.internal_error.as_deref().unwrap().contains("password"));
    // The session never sees the detail: not in the inbox, not in the result.
    assert_eq!(
        env.count(
            "SELECT count(*) FROM inbox WHERE body LIKE '%password%' OR data LIKE '%password%'"
        ),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM blobs WHERE CAST(content AS TEXT) LIKE '%password%'"),
        0
    );
    assert_eq!(
        env.client.get(&ok).await.unwrap().state,
        RunState::Completed
    );
}
