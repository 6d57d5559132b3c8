//! `http_request`: one HTTP(S) request for monitors. Result {status, headers, body (capped),
//! body_truncated, elapsed_ms}; a connection failure or an unexpected status is a tool error
//! naming the cause. The blocking client runs off the async runtime.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::tool::sink::escape_bytes;
use crate::tool::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome};

/// Sends one HTTP request and checks its status.
#[derive(Debug, Clone, Copy)]
pub struct HttpRequest;

#[derive(Debug, Deserialize)]
struct Args {
    #[serde(default = "default_method")]
    method: String,
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
    expected_status: Option<Value>,
    #[serde(default = "default_timeout")]
    timeout_ms: u64,
    #[serde(default = "default_max_body")]
    max_body_bytes: u64,
}

fn default_method() -> String {
    "GET".into()
}
fn default_timeout() -> u64 {
    30_000
}
fn default_max_body() -> u64 {
    64 * 1024
}

/// Whether `status` is what the args expect (default: any 2xx).
fn status_ok(expected: Option<&Value>, status: u16) -> bool {
    match expected {
        None => (200..300).contains(&status),
        Some(Value::Array(list)) => list.iter().any(|v| v.as_u64() == Some(status as u64)),
        Some(v) => v.as_u64() == Some(status as u64),
    }
}

struct Response {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
    truncated: bool,
}

fn send(a: &Args) -> Result<Response, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_millis(a.timeout_ms)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = ureq::http::Request::builder()
        .method(a.method.as_str())
        .uri(a.url.as_str());
    for (k, v) in &a.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(a.body.clone().unwrap_or_default().into_bytes())
        .map_err(|e| format!("bad request: {e}"))?;
    let mut resp = agent.run(req).map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), escape_bytes(v.as_bytes())))
        .collect();
    let mut body = Vec::new();
    resp.body_mut()
        .as_reader()
        .take(a.max_body_bytes + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("reading the body: {e}"))?;
    let truncated = body.len() as u64 > a.max_body_bytes;
    body.truncate(a.max_body_bytes as usize);
    Ok(Response {
        status,
        headers,
        body,
        truncated,
    })
}

#[async_trait]
impl Tool for HttpRequest {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "http_request",
            "Sends an HTTP request (method, url, headers, body) and checks the status \
             (expected_status: a code or a list; default any 2xx).",
            json!({
                "type": "object",
                "properties": {
                    "method": {"enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]},
                    "url": {"type": "string", "pattern": "^https?://"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "body": {"type": "string"},
                    "expected_status": {"oneOf": [
                        {"type": "integer", "minimum": 100, "maximum": 599},
                        {"type": "array", "items": {"type": "integer", "minimum": 100, "maximum": 599}, "minItems": 1}
                    ]},
                    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 3_600_000},
                    "max_body_bytes": {"type": "integer", "minimum": 0, "maximum": 10_485_760}
                },
                "required": ["url"],
                "additionalProperties": false
            }),
        )
        .display_name("HTTP request")
        .hints(ToolHints {
            readonly: false,
            idempotent: false,
            supports_background: true,
        })
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let args: Args = match serde_json::from_value(ctx.args.clone()) {
            Ok(a) => a,
            Err(e) => return ToolOutcome::tool_error(format!("bad http_request args: {e}")),
        };
        let what = format!("{} {}", args.method, args.url);
        ctx.sink.status(format!("sending {what}"));
        let started = Instant::now();
        let expected = args.expected_status.clone();
        let job = tokio::task::spawn_blocking(move || send(&args));
        let resp = tokio::select! {
            r = job => r,
            _ = ctx.cancel.cancelled() => return ToolOutcome::tool_error(format!("{what}: cancelled")),
        };
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let resp = match resp {
            Ok(Ok(r)) => r,
            Ok(Err(cause)) => return ToolOutcome::tool_error(format!("{what}: {cause}")),
            Err(e) => return ToolOutcome::internal(&e),
        };
        let body = match String::from_utf8(resp.body.clone()) {
            Ok(s) => s,
            Err(_) => escape_bytes(&resp.body),
        };
        ctx.sink.status(format!("{what}: {}", resp.status));
        if !status_ok(expected.as_ref(), resp.status) {
            let want = expected.map_or("2xx".to_string(), |v| v.to_string());
            let head: String = body.chars().take(200).collect();
            return ToolOutcome::tool_error(format!(
                "{what}: unexpected status {} (expected {want}); body: {head}",
                resp.status
            ));
        }
        ToolOutcome::ok(json!({
            "status": resp.status,
            "headers": resp.headers,
            "body": body,
            "body_truncated": resp.truncated,
            "elapsed_ms": elapsed_ms,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_status_forms() {
        assert!(status_ok(None, 204));
        assert!(!status_ok(None, 301));
        assert!(status_ok(Some(&json!(404)), 404));
        assert!(status_ok(Some(&json!([200, 503])), 503));
        assert!(!status_ok(Some(&json!([200])), 500));
    }
}
