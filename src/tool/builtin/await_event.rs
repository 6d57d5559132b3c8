//! `await_event`: waits for an event sent to its run (`{"event": NAME, "timeout": "1h"}`) and
//! returns its payload. The wait frees the worker's slot (the run is queued, waiting for the
//! event), so operators and tests can use durable waits from the CLI: `toolq enqueue
//! await_event --args '{"event": "go"}'`, then `toolq signal RUN go --payload '{"n": 1}'`.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use crate::tool::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome};

/// The longest event name (the same as `toolq signal` accepts).
const MAX_EVENT_NAME: usize = 200;

/// How long it waits when the args give no `timeout`.
const DEFAULT_TIMEOUT: &str = "24h";

/// Waits for an event and returns its payload.
#[derive(Debug, Clone, Copy)]
pub struct AwaitEvent;

/// The event's name and the timeout, or the tool error saying what is wrong with them (the
/// schema has refused what it can at enqueue).
fn read_args(args: &serde_json::Value) -> Result<(String, Duration), String> {
    let event = match args.get("event").and_then(|v| v.as_str()) {
        Some(e) if !e.is_empty() => e.to_string(),
        _ => return Err("event must be a non-empty string".into()),
    };
    if event.chars().count() > MAX_EVENT_NAME {
        return Err(format!("event is longer than {MAX_EVENT_NAME} characters"));
    }
    if event.chars().any(char::is_control) {
        return Err(format!(
            "event {event:?} must not contain control characters"
        ));
    }
    let text = match args.get("timeout") {
        None => DEFAULT_TIMEOUT,
        Some(v) => v
            .as_str()
            .ok_or("timeout must be a duration string such as \"1h\"")?,
    };
    let timeout =
        crate::clock::parse_duration(text).map_err(|r| format!("timeout {text:?} {r}"))?;
    if timeout.is_zero() {
        return Err(format!("timeout {text:?} must be longer than zero"));
    }
    Ok((event, timeout))
}

#[async_trait]
impl Tool for AwaitEvent {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "await_event",
            "Waits for the event `event` sent to this run (toolq signal RUN NAME --payload JSON) \
             for at most `timeout` (default 24h), without holding a worker slot; returns the \
             event's payload.",
            json!({
                "type": "object",
                "properties": {
                    "event": {"type": "string", "minLength": 1, "maxLength": MAX_EVENT_NAME},
                    "timeout": {"type": "string", "minLength": 1, "description": "e.g. 30s, 10m, 1h, 7d (default 24h)"}
                },
                "required": ["event"],
                "additionalProperties": false
            }),
        )
        .display_name("Await event")
        .hints(ToolHints {
            readonly: true,
            idempotent: true,
            supports_background: true,
        })
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let (event, timeout) = match read_args(&ctx.args) {
            Ok(a) => a,
            Err(e) => return ToolOutcome::tool_error(e),
        };
        ctx.sink.status(format!(
            "waiting for event {event:?} (at most {})",
            crate::clock::format_duration(timeout)
        ));
        match ctx.wait_for_event(&event, timeout).await {
            Ok(Some(payload)) => ToolOutcome::ok(json!({"event": event, "payload": payload})),
            Ok(None) => ToolOutcome::tool_error(format!(
                "no event {event:?} arrived within {}",
                crate::clock::format_duration(timeout)
            )),
            Err(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_checked() {
        let (e, t) = read_args(&json!({"event": "go"})).unwrap();
        assert_eq!((e.as_str(), t), ("go", Duration::from_secs(86_400)));
        let (_, t) = read_args(&json!({"event": "go", "timeout": "1h"})).unwrap();
        assert_eq!(t, Duration::from_secs(3600));
        for (args, needle) in [
            (json!({}), "event must be"),
            (json!({"event": ""}), "event must be"),
            (json!({"event": "x".repeat(201)}), "longer than 200"),
            (json!({"event": "a\nb"}), "control"),
            (json!({"event": "go", "timeout": "soon"}), "\"soon\""),
            (json!({"event": "go", "timeout": "0s"}), "longer than zero"),
            (json!({"event": "go", "timeout": 5}), "duration string"),
        ] {
            let e = read_args(&args).unwrap_err();
            assert!(e.contains(needle), "{args}: {e}");
        }
        // The schema refuses at enqueue what it can.
        let schema = AwaitEvent.definition().parameters;
        let v = jsonschema::validator_for(&schema).unwrap();
        assert!(v.is_valid(&json!({"event": "go", "timeout": "1h"})));
        assert!(!v.is_valid(&json!({"event": ""})));
        assert!(!v.is_valid(&json!({"event": "x".repeat(201)})));
        assert!(!v.is_valid(&json!({"timeout": "1h"})));
        assert!(!v.is_valid(&json!({"event": "go", "timeout": 5})));
    }
}
