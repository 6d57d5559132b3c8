//! `get_current_time`: the current time in UTC and, optionally, an IANA zone.

use async_trait::async_trait;
use chrono::SecondsFormat;
use serde_json::json;

use crate::tool::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome};

/// Returns the current time.
#[derive(Debug, Clone, Copy)]
pub struct GetCurrentTime;

#[async_trait]
impl Tool for GetCurrentTime {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "get_current_time",
            "Returns the current time in UTC, and in `timezone` (IANA name) when given.",
            json!({
                "type": "object",
                "properties": {"timezone": {"type": "string"}},
                "additionalProperties": false
            }),
        )
        .display_name("Current time")
        .hints(ToolHints {
            readonly: true,
            idempotent: false,
            supports_background: false,
        })
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let now = ctx.clock.now();
        let utc = now.to_rfc3339_opts(SecondsFormat::Millis, true);
        match ctx.args.get("timezone").and_then(|v| v.as_str()) {
            None => ToolOutcome::ok(json!({ "utc": utc })),
            Some(name) => match crate::schedule::parse_timezone(name) {
                Ok(tz) => ToolOutcome::ok(json!({
                    "utc": utc,
                    "timezone": name,
                    "local": tz.local(now).to_rfc3339_opts(SecondsFormat::Millis, false),
                })),
                Err(e) => ToolOutcome::tool_error(e.to_string()),
            },
        }
    }
}
