use serde_json::json;
use toolq::inbox::InboxFilter;
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
        json!({"status": "completed", "result": {"echoed": "hi", "length": 2}})
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

/// Recording is exactly-once down to the schema: a second final message for the same run
/// attempt is refused by `inbox_run_idx` (whatever code tried it), while approval requests
/// for one attempt are not limited by it.
#[tokio::test]
async fn the_database_refuses_a_second_final_message_for_an_attempt() {
    let env = TestEnv::new();
    let id = env
        .client
        .enqueue(EnqueueRequest::new("echo", json!({"message": "once"})))
        .await
        .unwrap()
        .run_id;
    env.drain().await;
    let insert = |kind: &str, attempt: i64| {
        env.db.try_exec(&format!(
            "INSERT INTO inbox (session_id, run_id, attempt, kind, body, created_at) \
             VALUES ('default', '{}', {attempt}, '{kind}', 'x', '2026-11-01T00:00:00.000Z')",
            id.as_str()
        ))
    };
    for kind in ["completed", "failed", "cancelled"] {
        let err = insert(kind, 1).expect_err("a second final message for attempt 1");
        // SQLite: "UNIQUE constraint failed: index 'inbox_run_idx'"; Postgres: "duplicate
        // key value violates unique constraint \"inbox_run_idx\"".
        assert!(
            err.contains("inbox_run_idx") && err.to_lowercase().contains("unique"),
            "{kind}: {err}"
        );
    }
    insert("failed", 2).expect("another attempt's final message");
    insert("approval_request", 1).expect("an approval request");
    insert("approval_request", 1).expect("another approval request for the same attempt");
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM inbox WHERE run_id = '{}' AND attempt = 1",
            id.as_str()
        )),
        3
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
        .enqueue(EnqueueRequest::new("echo", json!({"message": "hi"})))
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
        env.count(&format!(
            "SELECT count(*) FROM blobs WHERE {} LIKE '%password%'",
            env.db.blob_as_text("content")
        )),
        0
    );
    assert_eq!(
        env.client.get(&ok).await.unwrap().state,
        RunState::Completed
    );
}

async fn chatty_log(bytes: u64) -> (Vec<u8>, bool, String) {
    let env = TestEnv::with_config(|c| {
        c.runs.log_cap_bytes = 1024;
        c.runs.tail_chars = 16;
    });
    let id = env
        .client
        .enqueue(EnqueueRequest::new(
            "chatty",
            json!({"bytes": bytes, "line": "abcdefghij"}),
        ))
        .await
        .unwrap()
        .run_id;
    env.drain().await;
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.state, RunState::Completed);
    let blob = env.client.log(&run).await.unwrap().unwrap();
    (blob.content, blob.truncated, run.output_tail.unwrap())
}

#[tokio::test]
async fn log_cap_and_tail_are_exact_at_the_boundary() {
    // 1000 + 4 characters of output become lines of 1010 and 14 bytes: exactly the 1024-byte cap.
    let (log, truncated, tail) = chatty_log(1004).await;
    assert_eq!(log.len(), 1024);
    assert!(!truncated);
    assert!(!String::from_utf8_lossy(&log).contains("truncated"));
    assert_eq!(tail, "ghij\n[stdout] abcd\n"[3..].to_string());
    assert_eq!(tail.chars().count(), 16);

    // One more character: the line that does not fit is left out whole (a line end is near
    // the cap), and the note names the bytes kept and the cap.
    let (log, truncated, tail) = chatty_log(1005).await;
    assert!(truncated);
    let text = String::from_utf8(log).unwrap();
    let note =
        "[system] background output truncated at 1010 bytes (the log keeps at most 1024 bytes)\n";
    assert!(text.ends_with(&format!("ghij\n{note}")), "{text:?}");
    assert_eq!(text.len(), 1010 + note.len());
    // The tail shows the latest output, past the cap.
    assert_eq!(tail, "\n[stdout] abcde\n");
}

#[tokio::test]
async fn huge_output_keeps_the_cap_and_the_tail_moves_on() {
    let env = TestEnv::new();
    let id = env
        .client
        .enqueue(EnqueueRequest::new(
            "chatty",
            json!({"bytes": 3_000_000, "line": "0123456789"}),
        ))
        .await
        .unwrap()
        .run_id;
    env.drain().await;
    let run = env.client.get(&id).await.unwrap();
    let blob = env.client.log(&run).await.unwrap().unwrap();
    assert!(blob.truncated);
    assert!(blob.content.len() < 256 * 1024 + 100);
    assert_eq!(run.output_tail.unwrap().chars().count(), 2048);
}

/// A batch of attempt ends is recorded with multi-row inserts (chunks of 32, 16, ... rows):
/// each applied run gets exactly its blobs and message, in the batch's order; a fenced-out
/// run gets nothing; a run without a completion signal gets no message; a sidecar blob is
/// written beside the others.
#[tokio::test]
async fn a_large_batch_of_ends_writes_each_runs_artifacts_once() {
    use toolq::run::{Fence, FinishRecord};
    use toolq::tool::ToolSuccess;
    use toolq::tool::sink::SinkSnapshot;
    use toolq::worker::finish::{AttemptEnd, decide};
    use toolq::{Run, ToolOutcome};

    let env = TestEnv::new();
    const N: usize = 45; // 32 + 8 + 4 + 1 rows of messages; more blob rows
    for i in 0..N {
        let mut req =
            EnqueueRequest::new("echo", json!({"message": i.to_string()})).session("batch");
        req.signal_on_completion = i != 3;
        env.client.enqueue(req).await.unwrap();
    }
    let now = env.client.now();
    let runs: Vec<Run> = env
        .client
        .engine()
        .attempt_claim(toolq::store::Claim {
            worker: "wk_test".into(),
            now,
            lease_until: now + chrono::Duration::seconds(30),
            max: N,
            per_session: N as i64,
            after_session: None,
            tools: env.client.registry().names().into(),
            limits: Default::default(),
            background_room: None,
        })
        .await
        .unwrap();
    assert_eq!(runs.len(), N);
    let records: Vec<FinishRecord> = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let outcome = ToolOutcome::Success(ToolSuccess {
                value: json!({"i": i}),
                images: Vec::new(),
                raw_output: (i == 7).then(|| "raw seven".to_string()),
            });
            let mut rec = decide(
                run,
                AttemptEnd::Returned(outcome),
                SinkSnapshot {
                    log: Some((format!("[stdout] line {i}\n").into_bytes(), false)),
                    ..SinkSnapshot::default()
                },
                &env.client.config().runs,
                &env.client.config().retry_policy(&run.tool),
                now,
                0.5,
            );
            if i % 2 == 0 {
                rec.encode_message(); // the others are encoded by the writer
            }
            if i == 5 {
                rec.fence = Fence::Lease("not-the-lease".into());
            }
            rec
        })
        .collect();
    let applied = env.client.engine().run_end(records, now).await.unwrap();
    assert_eq!(applied.iter().filter(|ok| !**ok).count(), 1);
    assert!(!applied[5]);
    let count = |sql: String| env.count(&sql);
    for (i, run) in runs.iter().enumerate() {
        let id = run.id.as_str();
        let blobs = count(format!("SELECT count(*) FROM blobs WHERE run_id = '{id}'"));
        let messages = count(format!("SELECT count(*) FROM inbox WHERE run_id = '{id}'"));
        let state = env.client.get(&run.id).await.unwrap().state;
        match i {
            5 => {
                assert_eq!(
                    (blobs, messages, state),
                    (0, 0, RunState::Running),
                    "fenced out"
                );
            }
            3 => assert_eq!(
                (blobs, messages, state),
                (2, 0, RunState::Completed),
                "no signal"
            ),
            7 => assert_eq!(
                (blobs, messages, state),
                (3, 1, RunState::Completed),
                "sidecar"
            ),
            _ => assert_eq!(
                (blobs, messages, state),
                (2, 1, RunState::Completed),
                "run {i}"
            ),
        }
    }
    let content = |run: &Run, name: &str| {
        env.db.column(&format!(
            "SELECT {} FROM blobs WHERE path = '/.background/{}/{name}'",
            env.db.blob_as_text("content"),
            run.id.as_str()
        ))
    };
    assert_eq!(content(&runs[7], "raw_output.txt"), ["raw seven"]);
    assert_eq!(
        content(&runs[44], "output.log"),
        ["[stdout] line 44\n"],
        "each log row holds its own run's bytes"
    );
    // Messages are numbered in the batch's order, and each names its own run and result.
    let inbox = env
        .client
        .inbox(
            "batch",
            InboxFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let expected: Vec<&str> = runs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 5)
        .map(|(_, r)| r.id.as_str())
        .collect();
    let got: Vec<&str> = inbox.iter().filter_map(|m| m.run_id.as_deref()).collect();
    assert_eq!(got, expected);
    assert!(inbox.windows(2).all(|w| w[0].id < w[1].id));
    for m in &inbox {
        let run_id = m.run_id.as_deref().unwrap();
        assert!(
            m.body.contains(&format!("- run_id: {run_id}")),
            "{}",
            m.body
        );
        assert_eq!(m.data["run_id"], run_id, "{}", m.data);
    }
}
