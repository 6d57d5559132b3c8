//! Embedding toolq: a custom tool, an in-process worker, an enqueue, and reading the inbox —
//! the path an agent host takes. Run with `cargo run --example embed`.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolq::inbox::InboxFilter;
use toolq::tool::Stream;
use toolq::{
    Client, Config, EnqueueRequest, RegistryBuilder, Tool, ToolContext, ToolDef, ToolOutcome,
};

/// Counts the words of a text, reporting progress as it goes.
struct WordCount;

#[async_trait]
impl Tool for WordCount {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "word_count",
            "Counts the words of a text.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        )
        .display_name("Word count")
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let text = ctx.args["text"].as_str().unwrap_or_default();
        ctx.sink.status("counting");
        ctx.sink.output(
            Stream::Stdout,
            format!("got {} bytes", text.len()).as_bytes(),
        );
        ToolOutcome::ok(json!({ "words": text.split_whitespace().count() }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = Config {
        db_path: dir.path().join("embed.db").display().to_string(),
        ..Config::default()
    };
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(WordCount)
        .build()?;
    let client = Client::open(config, registry)?;

    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(client.worker(Default::default()).run(shutdown.clone()));

    let run = client
        .enqueue(
            EnqueueRequest::new("word_count", json!({"text": "to be or not to be"}))
                .session("agent-1"),
        )
        .await?;
    println!("enqueued {}", run.run_id);

    // The session reads its inbox later; here we poll until the completion message is there.
    let message = loop {
        let msgs = client
            .inbox(
                "agent-1",
                InboxFilter {
                    limit: 10,
                    ..Default::default()
                },
            )
            .await?;
        if let Some(m) = msgs.into_iter().next() {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!("{}", message.body);
    let finished = client.get(&run.run_id).await?;
    let result = client
        .result(&finished)
        .await?
        .map(|b| String::from_utf8_lossy(&b.content).into_owned());
    println!("result: {}", result.unwrap_or_default());
    client.mark_inbox("agent-1", vec![message.id], true).await?;

    shutdown.cancel();
    worker.await??;
    Ok(())
}
