//! `sleep`: waits `{"ms": N}` milliseconds, ending early when cancelled.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use crate::run::Progress;
use crate::tool::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome};

/// Sleeps, reporting progress; stops early on cancellation.
#[derive(Debug, Clone, Copy)]
pub struct Sleep;

#[async_trait]
impl Tool for Sleep {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "sleep",
            "Waits for ms milliseconds (at most one day); ends early when cancelled.",
            json!({
                "type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 86_400_000}},
                "required": ["ms"],
                "additionalProperties": false
            }),
        )
        .display_name("Sleep")
        .hints(ToolHints {
            readonly: true,
            idempotent: true,
            supports_background: true,
        })
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let ms = ctx.args["ms"].as_u64().unwrap_or(0);
        ctx.sink.status(format!("sleeping {ms} ms"));
        ctx.sink.progress(Progress {
            current: 0.0,
            total: Some(ms as f64),
            unit: Some("ms".into()),
            label: None,
        });
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                ctx.sink.progress(Progress { current: ms as f64, total: Some(ms as f64), unit: Some("ms".into()), label: None });
                ToolOutcome::ok(json!({ "slept_ms": ms }))
            }
            _ = ctx.cancel.cancelled() => ToolOutcome::tool_error("sleep cancelled"),
        }
    }
}
