//! Texts of inbox messages (the seed's completion format) and their structured form. Pure.

use serde_json::{Value, json};

use crate::ids::RunId;
use crate::run::artifacts::{log_path, result_path};
use crate::run::delivery::Delivery;
use serde::Serialize;

/// Kinds of final message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalKind {
    /// The run completed.
    Completed,
    /// The run failed.
    Failed,
    /// The run was cancelled.
    Cancelled,
}

impl FinalKind {
    /// The inbox `kind` column value.
    pub fn as_str(self) -> &'static str {
        match self {
            FinalKind::Completed => "completed",
            FinalKind::Failed => "failed",
            FinalKind::Cancelled => "cancelled",
        }
    }
}

/// What a final message is about.
#[derive(Debug, Clone)]
pub struct About<'a> {
    /// Run id.
    pub run_id: &'a RunId,
    /// Session.
    pub session_id: &'a str,
    /// Title.
    pub title: &'a str,
    /// Tool name.
    pub tool: &'a str,
    /// Attempt.
    pub attempt: i64,
    /// Delivery mode.
    pub delivery: Delivery,
}

/// Shortens a summary to one line of at most `max` characters.
pub fn summarize(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let head: String = one_line.chars().take(max.saturating_sub(3)).collect();
        format!("{head}...")
    }
}

/// The seed's completion text:
/// `Background run completed.` then run_id, title, tool, summary, result_path, log_path lines.
pub fn final_text(kind: FinalKind, about: &About<'_>, summary: &str) -> String {
    format!(
        "Background run {}.\n- run_id: {}\n- title: {}\n- tool: {}\n- summary: {}\n- result_path: {}\n- log_path: {}",
        kind.as_str(),
        about.run_id,
        about.title,
        about.tool,
        summary,
        result_path(about.run_id),
        log_path(about.run_id),
    )
}

/// A final message: text and structured data.
pub fn final_message(kind: FinalKind, about: &About<'_>, summary: &str) -> NewMessage {
    let summary = summarize(summary, 300);
    NewMessage {
        session_id: about.session_id.to_string(),
        run_id: about.run_id.to_string(),
        attempt: about.attempt,
        kind: kind.as_str(),
        body: final_text(kind, about, &summary),
        data: json!({
            "status": kind.as_str(),
            "run_id": about.run_id.as_str(),
            "title": about.title,
            "tool": about.tool,
            "summary": summary,
            "result_path": result_path(about.run_id),
            "log_path": log_path(about.run_id),
        }),
        delivery: about.delivery,
    }
}

/// The approval request posted when a run of a tool that requires approval is claimed:
/// `Approval requested.` then run_id, title, tool, args and deadline lines.
pub fn approval_message(about: &About<'_>, args: &Value, deadline: Option<&str>) -> NewMessage {
    let body = format!(
        "Approval requested.\n- run_id: {}\n- title: {}\n- tool: {}\n- args: {}\n- deadline: {}\n\
         - approve: toolq approve {}\n- deny: toolq deny {}",
        about.run_id,
        about.title,
        about.tool,
        args,
        deadline.unwrap_or("none"),
        about.run_id,
        about.run_id,
    );
    NewMessage {
        session_id: about.session_id.to_string(),
        run_id: about.run_id.to_string(),
        attempt: about.attempt,
        kind: "approval_request",
        body,
        data: json!({
            "status": "awaiting_approval",
            "run_id": about.run_id.as_str(),
            "title": about.title,
            "tool": about.tool,
            "args": args,
            "deadline": deadline,
        }),
        delivery: about.delivery,
    }
}

/// A short summary of a success value: its `message`/`summary` string when it has one,
/// otherwise compact JSON.
pub fn summary_of(value: &Value) -> String {
    for key in ["summary", "message"] {
        if let Some(s) = value.get(key).and_then(Value::as_str) {
            return s.to_string();
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_text_follows_the_seed() {
        let id: RunId = "bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f".parse().unwrap();
        let about = About {
            run_id: &id,
            session_id: "s",
            title: "Echo",
            tool: "echo",
            attempt: 1,
            delivery: Delivery::WhenIdle,
        };
        let m = final_message(FinalKind::Completed, &about, "hi");
        assert_eq!(
            m.body,
            "Background run completed.\n- run_id: bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f\n- title: Echo\n- tool: echo\n- summary: hi\n\
             - result_path: /.background/bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f/result.json\n\
             - log_path: /.background/bg_0190f0c0a1b27c3d8e9f0a1b2c3d4e5f/output.log"
        );
        assert_eq!(m.data["status"], "completed");
        assert_eq!(summarize(&"x".repeat(400), 10), "xxxxxxx...");
    }
}

/// A message to insert.
#[derive(Debug, Clone, Serialize)]
pub struct NewMessage {
    /// Recipient session.
    pub session_id: String,
    /// The run it is about.
    pub run_id: String,
    /// The run's attempt when it was written.
    pub attempt: i64,
    /// completed | failed | cancelled | approval_request.
    pub kind: &'static str,
    /// Text for the session.
    pub body: String,
    /// The same, structured.
    pub data: Value,
    /// Delivery mode.
    pub delivery: Delivery,
}

/// A stored message (`toolq inbox --json` prints a list of these; the HTTP API's inbox page
/// and stream carry them).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Message {
    /// Increasing id.
    pub id: i64,
    /// Recipient session.
    pub session_id: String,
    /// The run it is about.
    pub run_id: Option<String>,
    /// completed | failed | cancelled | approval_request | batch_completed (a batch's
    /// message: no `run_id`).
    pub kind: String,
    /// Text for the session.
    pub body: String,
    /// Structured form.
    pub data: Value,
    /// Delivery mode.
    pub delivery: String,
    /// When it was written.
    pub created_at: String,
    /// When it was first read.
    pub read_at: Option<String>,
    /// When it was acknowledged.
    pub acked_at: Option<String>,
}

impl Message {
    /// A `silent` message: add it to the model's context without starting a turn or
    /// notifying the user (the seed's `Silent`), then acknowledge it.
    pub fn is_silent(&self) -> bool {
        self.delivery == "silent"
    }
}

/// Which messages `Engine::inbox_list` returns.
#[derive(Debug, Clone, Default)]
pub struct InboxFilter {
    /// Only messages with a larger id.
    pub after_id: i64,
    /// Only unacknowledged messages.
    pub unacked_only: bool,
    /// At most this many, oldest first.
    pub limit: i64,
}

/// Which page [`crate::Client::inbox_page`] returns.
#[derive(Debug, Clone, Default)]
pub struct InboxPage {
    /// Only messages with an id above this one: the `limit` messages just after it.
    pub after_id: Option<i64>,
    /// Only messages with an id below this one: the `limit` messages just before it.
    pub before_id: Option<i64>,
    /// Only unacknowledged messages.
    pub unacked_only: bool,
    /// At most this many.
    pub limit: i64,
}
