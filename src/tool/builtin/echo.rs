//! `echo`: the seed's echo. Takes `{"message": string}` (nothing else) and returns
//! `{"echoed": message, "length": bytes}`.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::tool::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome};

/// Echoes a message back with its length.
#[derive(Debug, Clone, Copy)]
pub struct Echo;

#[async_trait]
impl Tool for Echo {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "echo",
            "Echo back the provided message. Useful for testing tool execution.",
            json!({
                "type": "object",
                "properties": {
                    "message": {"type": "string", "description": "The message to echo back"}
                },
                "required": ["message"],
                "additionalProperties": false
            }),
        )
        .display_name("Echo")
        .hints(
            ToolHints::default()
                .with_readonly(true)
                .with_idempotent(true),
        )
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let message = ctx
            .args
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("");
        // The seed counts bytes (`str::len`), not characters.
        ToolOutcome::ok(json!({"echoed": message, "length": message.len()}))
    }
}
