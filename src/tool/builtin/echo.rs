//! `echo`: returns its arguments; the no-op of benchmarks and smoke tests.

use async_trait::async_trait;
use serde_json::json;

use crate::tool::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome};

/// Returns its arguments as the result.
#[derive(Debug, Clone, Copy)]
pub struct Echo;

#[async_trait]
impl Tool for Echo {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "echo",
            "Returns its arguments unchanged.",
            json!({"type": "object", "properties": {"message": {"type": "string"}}}),
        )
        .display_name("Echo")
        .hints(ToolHints {
            readonly: true,
            idempotent: true,
            supports_background: true,
        })
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        ToolOutcome::ok(ctx.args)
    }
}
