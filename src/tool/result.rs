//! The seed's tool result for hosts: [`ToolOutcome::into_tool_result`] turns an outcome into
//! what an agent host hands back to its model (call id, tool name, content, error flag,
//! images, raw output). `connection_required` is not an error there: it carries the provider
//! (a queued run with it fails instead; see [`ToolOutcome::ConnectionRequired`]).

use serde::Serialize;
use serde_json::{Value, json};

use super::{INTERNAL_ERROR_TEXT, Image, ToolOutcome};

/// A tool call's answer as a host sends it back to its model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    /// The model's id for the call.
    pub tool_call_id: String,
    /// The tool called.
    pub tool_name: String,
    /// What the model sees: the success value, `{"error": text}`, or
    /// `{"connection_required": provider}`.
    pub content: Value,
    /// True for a tool error or an internal error (whose details stay out of `content`).
    pub is_error: bool,
    /// Images returned with a success.
    pub images: Vec<Image>,
    /// The provider to connect, when the tool needs a connection first (not an error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_required: Option<String>,
    /// The tool's raw output, when it returned one
    /// ([`ToolOutcome::success_with_raw_output`]): for the host (logs, UI), not the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<String>,
}

impl ToolOutcome {
    /// A connection to `provider` is needed first (the seed's `connection_required`).
    pub fn connection_required(provider: impl Into<String>) -> Self {
        ToolOutcome::ConnectionRequired {
            provider: provider.into(),
        }
    }

    /// It worked.
    pub fn is_success(&self) -> bool {
        matches!(self, ToolOutcome::Success(_))
    }

    /// A tool error or an internal error; `connection_required` is not one.
    pub fn is_error(&self) -> bool {
        matches!(self, ToolOutcome::ToolError(_) | ToolOutcome::Internal(_))
    }

    /// The tool needs a connection first.
    pub fn is_connection_required(&self) -> bool {
        matches!(self, ToolOutcome::ConnectionRequired { .. })
    }

    /// The seed's conversion for hosts. An internal error's details go to tracing only; the
    /// model sees [`INTERNAL_ERROR_TEXT`].
    pub fn into_tool_result(self, tool_call_id: &str, tool_name: &str) -> ToolResult {
        let mut r = ToolResult {
            tool_call_id: tool_call_id.to_string(),
            tool_name: tool_name.to_string(),
            content: Value::Null,
            is_error: false,
            images: Vec::new(),
            connection_required: None,
            raw_output: None,
        };
        match self {
            ToolOutcome::Success(s) => {
                r.content = s.value;
                r.images = s.images;
                r.raw_output = s.raw_output;
            }
            ToolOutcome::ToolError(message) => {
                r.content = json!({ "error": message });
                r.is_error = true;
            }
            ToolOutcome::Internal(detail) => {
                tracing::error!(tool_name, tool_call_id, internal_error = %detail,
                    "tool internal error (details hidden from the model)");
                r.content = json!({ "error": INTERNAL_ERROR_TEXT });
                r.is_error = true;
            }
            ToolOutcome::ConnectionRequired { provider } => {
                r.content = json!({ "connection_required": provider });
                r.connection_required = Some(provider);
            }
            // Only a queued run can run again later; an inline call has none.
            ToolOutcome::Snooze(d) => {
                r.content = json!({ "error": format!(
                    "the tool asked to snooze for {}, which only a queued run can do",
                    crate::clock::format_duration(d)
                ) });
                r.is_error = true;
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolSuccess;

    #[test]
    fn conversion_follows_the_seed() {
        let ok = ToolOutcome::Success(ToolSuccess {
            value: json!({"echoed": "hi", "length": 2}),
            images: vec![Image {
                mime_type: "image/png".into(),
                data: "AA==".into(),
            }],
            raw_output: Some("raw".into()),
        })
        .into_tool_result("call_1", "echo");
        assert_eq!(ok.tool_call_id, "call_1");
        assert_eq!(ok.tool_name, "echo");
        assert_eq!(ok.content, json!({"echoed": "hi", "length": 2}));
        assert!(!ok.is_error && ok.images.len() == 1);

        let e = ToolOutcome::tool_error("bad input").into_tool_result("c", "t");
        assert_eq!(e.content, json!({"error": "bad input"}));
        assert!(e.is_error);

        let i = ToolOutcome::Internal("password=hunter2".into()).into_tool_result("c", "t");
        assert_eq!(i.content, json!({"error": INTERNAL_ERROR_TEXT}));
        assert!(i.is_error && !i.content.to_string().contains("hunter2"));

        let outcome = ToolOutcome::connection_required("github");
        assert!(outcome.is_connection_required() && !outcome.is_error());
        let c = outcome.into_tool_result("c", "t");
        assert_eq!(c.content, json!({"connection_required": "github"}));
        assert_eq!(c.connection_required.as_deref(), Some("github"));
        assert!(!c.is_error);
    }
}
