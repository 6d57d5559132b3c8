//! The seed contract as a host meets it (issue 33, items 2 to 5): raw output and the seed's
//! result constructors and image fields, connection required on the background path, silent
//! delivery, and the registry beside the executor.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolq::client::SessionActivity;
use toolq::inbox::InboxFilter;
use toolq::tool::{ExecContext, Image, ToolExecutionOutcome, ToolHints, ToolRequest};
use toolq::{
    Client, Delivery, EnqueueRequest, ManualClock, RegistryBuilder, RunState, Tool, ToolContext,
    ToolDef, ToolOutcome,
};

use crate::support::{TestDb, t};

/// Returns a value with its raw output and an image, through the seed's constructors.
struct Raw;
#[async_trait]
impl Tool for Raw {
    fn definition(&self) -> ToolDef {
        ToolDef::new("raw", "raw output", json!({"type": "object"}))
            .hints(ToolHints::default().with_supports_background(true))
    }
    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        if ctx.args["images"] == json!(true) {
            let image = Image::new("AA==", "image/png");
            return ToolOutcome::success_with_images(json!({"shot": 1}), vec![image]);
        }
        ToolOutcome::success_with_raw_output(json!({"lines": 2}), "line one\nline two\n")
    }
}

/// Needs a GitHub connection that is not set up.
struct NeedsGithub;
#[async_trait]
impl Tool for NeedsGithub {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "needs_github",
            "needs a connection",
            json!({"type": "object"}),
        )
        .hints(ToolHints::default().with_supports_background(true))
    }
    async fn call(&self, _ctx: ToolContext) -> ToolOutcome {
        ToolOutcome::connection_required("github")
    }
}

struct Host {
    _dir: tempfile::TempDir,
    db: TestDb,
    client: Client,
}

fn host() -> Host {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    let mut c = db.config();
    c.worker.poll_interval = Duration::from_millis(20);
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(Raw)
        .tool(NeedsGithub)
        .build()
        .unwrap();
    let clock = ManualClock::new(t("2026-11-01T12:00:00Z"));
    let client = Client::open_with_clock(c, registry, Arc::new(clock)).unwrap();
    Host {
        _dir: dir,
        db,
        client,
    }
}

impl Host {
    async fn drain(&self) {
        let w = self.client.worker(toolq::WorkerOptions { drain: true });
        tokio::time::timeout(Duration::from_secs(60), w.run(Default::default()))
            .await
            .unwrap()
            .unwrap();
    }

    async fn call(&self, tool: &str, args: Value) -> ToolOutcome {
        let ex = self.client.executor();
        let req = ToolRequest::new("c1", tool, args);
        match ex.execute(req, &ExecContext::new("s")).await {
            ToolExecutionOutcome::Completed(o) => o,
            other => panic!("expected Completed, got {other:?}"),
        }
    }

    async fn enqueue(&self, tool: &str, args: Value, delivery: Delivery) -> toolq::RunId {
        let mut req = EnqueueRequest::new(tool, args).session("s");
        req.delivery = delivery;
        self.client.enqueue(req).await.unwrap().run_id
    }
}

#[tokio::test]
async fn issue_33_raw_output_reaches_the_host_and_images_speak_both_field_names() {
    let h = host();
    let r = h.call("raw", json!({})).await.into_tool_result("c1", "raw");
    assert_eq!(r.content, json!({"lines": 2}));
    assert_eq!(r.raw_output.as_deref(), Some("line one\nline two\n"));
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["raw_output"], "line one\nline two\n");
    assert!(v["content"].get("_raw_output").is_none(), "{v}");

    let r = h
        .call("raw", json!({"images": true}))
        .await
        .into_tool_result("c1", "raw");
    assert_eq!(r.raw_output, None);
    let v = serde_json::to_value(&r).unwrap();
    assert!(v.get("raw_output").is_none(), "{v}");
    // The seed's names and toolq's, side by side.
    assert_eq!(
        v["images"][0],
        json!({"base64": "AA==", "media_type": "image/png", "data": "AA==", "mime_type": "image/png"})
    );
    // Both names are accepted on input.
    let seed: Image =
        serde_json::from_value(json!({"base64": "AQ==", "media_type": "image/gif"})).unwrap();
    let ours: Image =
        serde_json::from_value(json!({"data": "AQ==", "mime_type": "image/gif"})).unwrap();
    assert_eq!(seed, ours);
    assert_eq!((seed.base64(), seed.media_type()), ("AQ==", "image/gif"));

    // The seed's internal_error_msg: the details stay out of what the model sees.
    let i = ToolOutcome::internal_error_msg("dsn=secret").into_tool_result("c", "t");
    assert!(i.is_error && !i.content.to_string().contains("secret"));
    assert_eq!(
        ToolOutcome::success(json!(1))
            .into_tool_result("c", "t")
            .content,
        json!(1)
    );

    // Queued: the raw output is kept beside the result; result.json keeps toolq's image fields.
    let raw = h.enqueue("raw", json!({}), Delivery::WhenIdle).await;
    let pics = h
        .enqueue("raw", json!({"images": true}), Delivery::WhenIdle)
        .await;
    h.drain().await;
    let side = h.db.count(&format!(
        "SELECT size FROM blobs WHERE path = '/.background/{raw}/raw_output.txt'"
    ));
    assert_eq!(side, "line one\nline two\n".len() as i64);
    let run = h.client.get(&pics).await.unwrap();
    let result = h.client.result(&run).await.unwrap().unwrap();
    let result: Value = serde_json::from_slice(&result.content).unwrap();
    assert_eq!(
        result["images"],
        json!([{"data": "AA==", "mime_type": "image/png"}])
    );
}

#[tokio::test]
async fn issue_33_connection_required_fails_a_background_run_but_not_an_inline_call() {
    let h = host();
    // Inline: not an error, as in the seed.
    let r = h
        .call("needs_github", json!({}))
        .await
        .into_tool_result("c1", "needs_github");
    assert!(!r.is_error);
    assert_eq!(r.connection_required.as_deref(), Some("github"));
    assert_eq!(r.content, json!({"connection_required": "github"}));

    // Background: the run fails with the seed's error, once (not retried).
    let id = h
        .enqueue("needs_github", json!({}), Delivery::WhenIdle)
        .await;
    h.drain().await;
    let run = h.client.get(&id).await.unwrap();
    let text = "Background tool requires connection setup: github";
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.error.as_deref(), Some(text));
    assert_eq!(run.attempt, 1);
    let result = h.client.result(&run).await.unwrap().unwrap();
    let result: Value = serde_json::from_slice(&result.content).unwrap();
    assert_eq!(result, json!({"status": "failed", "error": text}));
    let msgs = h
        .client
        .inbox(
            "s",
            InboxFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].kind, "failed");
    assert!(
        msgs[0].body.starts_with("Background run failed."),
        "{}",
        msgs[0].body
    );
    assert!(msgs[0].body.contains(text), "{}", msgs[0].body);
    assert_eq!(msgs[0].data["summary"], text);
}

#[tokio::test]
async fn issue_33_silent_messages_are_delivered_marked_silent_and_never_acknowledged_by_the_call() {
    let h = host();
    for (delivery, n) in [
        (Delivery::WhenIdle, 1),
        (Delivery::Interrupt, 2),
        (Delivery::Silent, 3),
    ] {
        h.enqueue("add", json!({"a": n, "b": 0}), delivery).await;
    }
    h.drain().await;
    let modes = |msgs: &[toolq::inbox::Message]| {
        let mut m: Vec<String> = msgs.iter().map(|m| m.delivery.clone()).collect();
        m.sort();
        m
    };
    // Busy: the interrupt, and the silent one to add to the context without a turn.
    let busy = h
        .client
        .deliverable("s", SessionActivity::Busy)
        .await
        .unwrap();
    assert_eq!(modes(&busy), ["interrupt", "silent"]);
    let silent: Vec<_> = busy.iter().filter(|m| m.is_silent()).collect();
    assert_eq!(silent.len(), 1);
    assert!(silent[0].body.starts_with("Background run completed."));
    // Offering it acknowledged nothing: the host does, once it is in the context.
    assert_eq!(
        h.db.count("SELECT count(*) FROM inbox WHERE acked_at IS NOT NULL"),
        0
    );
    let idle = h
        .client
        .deliverable("s", SessionActivity::Idle)
        .await
        .unwrap();
    assert_eq!(modes(&idle), ["interrupt", "silent", "when_idle"]);
    assert!(idle.windows(2).all(|w| w[0].id < w[1].id), "{idle:?}");
    h.client
        .mark_inbox("s", idle.iter().map(|m| m.id).collect(), true)
        .await
        .unwrap();
    assert!(
        h.client
            .deliverable("s", SessionActivity::Busy)
            .await
            .unwrap()
            .is_empty()
    );
}
