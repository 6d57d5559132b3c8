//! `spawn_background`: the seed's contract. Starts another tool as a background run of the same
//! session (returning its id and artifact paths at once), or, with a `schedule`, creates a
//! monitor that runs it on a cron or once. Rejections use the seed's messages verbatim.
//! Called from inside a queued run, the background run is that run's child (`show` lists it
//! under its parent, and the parent's `ctx.wait_children()` waits for it too); what the
//! caller gets back and the messages are the seed's either way.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::error::Error;
use crate::schedule::ScheduleRequest;
use crate::schedule::spec::{BOTH_MESSAGE, NEITHER_MESSAGE};
use crate::tool::{
    Acknowledgement, BackgroundRun, DefaultResultFormatter, Refused, ResultFormatter, Tool,
    ToolContext, ToolDef, ToolHints, ToolHost, ToolOutcome,
};

/// The tool's name (it may not target itself).
pub const NAME: &str = "spawn_background";

/// Starts a background run or creates a scheduled monitor.
#[derive(Debug, Clone, Copy)]
pub struct SpawnBackground;

struct ScheduleArgs {
    cron: Option<String>,
    at: Option<String>,
    timezone: String,
}

/// Reads `schedule` as the seed does: blank fields count as absent; both or neither is an error.
fn parse_schedule(args: &Value) -> Result<Option<ScheduleArgs>, String> {
    let Some(schedule) = args.get("schedule") else {
        return Ok(None);
    };
    let Some(schedule) = schedule.as_object() else {
        return Err("schedule must be an object".into());
    };
    let text = |k: &str| {
        schedule
            .get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let cron = text("cron_expression");
    let at = text("scheduled_at");
    if let Some(at) = &at
        && chrono::DateTime::parse_from_rfc3339(at).is_err()
    {
        return Err("scheduled_at must be RFC3339".into());
    }
    match (&cron, &at) {
        (None, None) => return Err(NEITHER_MESSAGE.into()),
        (Some(_), Some(_)) => return Err(BOTH_MESSAGE.into()),
        _ => {}
    }
    Ok(Some(ScheduleArgs {
        cron,
        at,
        timezone: text("timezone").unwrap_or_else(|| "UTC".into()),
    }))
}

/// An error from the library as the session should see it: bad input and limits are the
/// tool's verdict; anything else is internal.
fn outcome_of(e: Error) -> ToolOutcome {
    match e {
        Error::Input(_) | Error::Schedule(_) | Error::Conflict(_) => {
            ToolOutcome::tool_error(e.to_string())
        }
        other => ToolOutcome::internal(&other),
    }
}

/// The seed's message for the per-worker run limit. toolq's per-worker limit is the worker's
/// claim (a background run beyond it waits queued), so no call rejects with it; kept for hosts
/// that show the seed's texts.
pub fn worker_limit_message(max: i64) -> String {
    format!(
        "Worker is already running the maximum {max} active background runs. Try again after an existing run finishes."
    )
}

/// The seed's message for the per-session run limit.
pub fn run_limit_message(max: i64) -> String {
    format!(
        "Maximum {max} active background runs per session. Wait for an existing run to finish before starting another."
    )
}

#[async_trait]
impl Tool for SpawnBackground {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            NAME,
            "Run a background-capable tool asynchronously. Returns immediately and signals the session when the background run completes.",
            json!({
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "description": "Name of the tool to execute in the background"},
                    "args": {"type": "object", "description": "Arguments to pass to the target tool"},
                    "title": {"type": "string", "description": "Optional human-readable label for the background run"},
                    "schedule": {
                        "type": "object",
                        "description": "Optional session schedule. When provided, this creates a scheduled monitor instead of starting the run immediately.",
                        "properties": {
                            "cron_expression": {"type": "string", "description": "Standard 5-field cron expression for recurring runs (e.g. '*/10 * * * *' for every 10 minutes)"},
                            "scheduled_at": {"type": "string", "description": "RFC 3339 instant for a one-shot run (e.g. '2026-04-16T15:30:00Z')"},
                            "timezone": {"type": "string", "description": "IANA timezone for the schedule. Default: UTC"}
                        },
                        "additionalProperties": false
                    },
                    "signal_on_completion": {"type": "boolean", "description": "Send a message back to the session when the run completes", "default": true},
                    "tags": {
                        "type": "object",
                        "description": "Optional tags for the run (or for every run of the schedule), key to value, e.g. {\"customer\": \"acme\"}. Keys: 1-64 of A-Z a-z 0-9 _ . : / - starting with a letter or digit; values: 1-256 characters; at most 16. Not inherited from the calling run.",
                        "additionalProperties": {"type": "string"}
                    }
                },
                "required": ["tool", "args"],
                "additionalProperties": false
            }),
        )
        .display_name("Spawn Background")
        .hints(ToolHints {
            readonly: false,
            idempotent: false,
            supports_background: false,
        })
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let Some(host) = ctx.host.clone() else {
            return ToolOutcome::tool_error(
                "Tool registry not available in this context. spawn_background requires worker-side tool execution.",
            );
        };
        let call = match read_call(&ctx.args) {
            Ok(c) => c,
            Err(refusal) => return refusal,
        };
        let display_name = match check_target(&*host, &call.tool) {
            Ok(d) => d,
            Err(refusal) => return refusal,
        };
        let title = title_of(&ctx.args, &call.tool, &display_name);
        let Call {
            tool,
            args,
            signal,
            schedule,
            tags,
        } = call;
        match schedule {
            Some(s) => create_monitor(&*host, &ctx, tool, args, title, signal, s, tags).await,
            None => start_run(&*host, &ctx, tool, args, title, signal, tags).await,
        }
    }
}

/// What a call asks for, read from its arguments.
struct Call {
    /// The target tool's name.
    tool: String,
    /// The target's arguments.
    args: Value,
    /// `signal_on_completion` (default true).
    signal: bool,
    /// A monitor's schedule, when the call creates one.
    schedule: Option<ScheduleArgs>,
    /// The call's `tags`, checked (empty when not given).
    tags: crate::run::Tags,
}

/// Reads the call's arguments, or the seed's refusal of them (checked in the seed's order).
fn read_call(args: &Value) -> Result<Call, ToolOutcome> {
    let tool = match args.get("tool").and_then(Value::as_str).map(str::trim) {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => return Err(ToolOutcome::tool_error("Missing required parameter: tool")),
    };
    let tool_args = match args.get("args") {
        Some(a) if a.is_object() => a.clone(),
        _ => {
            return Err(ToolOutcome::tool_error(
                "Missing required parameter: args (object expected)",
            ));
        }
    };
    let signal = args
        .get("signal_on_completion")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let schedule = parse_schedule(args).map_err(ToolOutcome::tool_error)?;
    let tags = match args.get("tags") {
        None | Some(Value::Null) => crate::run::Tags::new(),
        Some(t) => serde_json::from_value::<std::collections::BTreeMap<String, String>>(t.clone())
            .map_err(|_| {
                ToolOutcome::tool_error("Invalid parameter: tags (an object of text values expected)")
            })
            .and_then(|m| {
                crate::run::Tags::from_map(m)
                    .map_err(|e| ToolOutcome::tool_error(format!("Invalid parameter: {e}")))
            })?,
    };
    Ok(Call {
        tool,
        args: tool_args,
        signal,
        schedule,
        tags,
    })
}

/// The target's display name if it may run in the background, or the seed's refusal: an
/// unknown tool, this tool itself, or a tool without `supports_background`.
fn check_target(host: &dyn ToolHost, tool: &str) -> Result<String, ToolOutcome> {
    let Some(entry) = host.registry().get(tool) else {
        return Err(ToolOutcome::tool_error(format!("Unknown tool: {tool}")));
    };
    if tool == NAME {
        return Err(ToolOutcome::tool_error(
            "spawn_background cannot target itself recursively",
        ));
    }
    if !entry.def.hints.supports_background {
        return Err(ToolOutcome::tool_error(format!(
            "Tool does not support background execution: {tool}"
        )));
    }
    Ok(entry.def.display_name.clone())
}

/// The run's title: the call's `title` when not blank, else the target's display name, else
/// "Background {tool}" (when the display name is blank or just the tool's name).
fn title_of(args: &Value, tool: &str, display_name: &str) -> String {
    args.get("title")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| {
            let d = display_name.trim();
            if d.is_empty() || d == tool {
                format!("Background {tool}")
            } else {
                d.to_string()
            }
        })
}

async fn create_monitor(
    host: &dyn ToolHost,
    ctx: &ToolContext,
    tool: String,
    args: Value,
    title: String,
    signal: bool,
    s: ScheduleArgs,
    tags: crate::run::Tags,
) -> ToolOutcome {
    let mut req = ScheduleRequest::new(tool.clone(), args, s.cron, s.at)
        .timezone(s.timezone)
        .session(ctx.session_id.clone());
    req.title = Some(title.clone());
    req.signal_on_completion = signal;
    req.tags = tags;
    match host.create_schedule(req).await {
        Ok(s) => ToolOutcome::ok(json!({
            "created": true,
            "status": "scheduled",
            "title": title,
            "tool": tool,
            "signal_on_completion": signal,
            "schedule_id": s.id,
            "schedule_type": s.schedule_type,
            "cron_expression": s.cron_expression,
            "scheduled_at": s.scheduled_at,
            "timezone": s.timezone,
            "next_trigger_at": s.next_trigger_at,
            "enabled": s.enabled,
        })),
        Err(e) => outcome_of(e),
    }
}

async fn start_run(
    host: &dyn ToolHost,
    ctx: &ToolContext,
    tool: String,
    args: Value,
    title: String,
    signal: bool,
    tags: crate::run::Tags,
) -> ToolOutcome {
    // A tool registered in Background mode brings its scheduling (the message's delivery).
    let mode = host.registry().get(&tool).map(|e| e.mode.clone());
    let run = BackgroundRun {
        session: ctx.session_id.clone(),
        tool: tool.clone(),
        args,
        title: title.clone(),
        signal_on_completion: signal,
        delivery: mode.as_ref().map(|m| m.delivery()).unwrap_or_default(),
        // Called by a queued run, the new run is listed under it (`runs.parent_run_id`); an
        // inline call's id names no run.
        parent: ctx.durable.is_recording().then(|| ctx.run_id.clone()),
        tags,
    };
    let run_id = match host.start_background(run, &ctx.run_id).await {
        Ok(id) => id,
        Err(Refused::Input(message) | Refused::Limit(message)) => {
            return ToolOutcome::tool_error(message);
        }
        Err(Refused::Internal(e)) => return ToolOutcome::internal(&e),
    };
    // The seed's reply ("running", the resource id, the artifact paths), or what the target's
    // formatter makes of it.
    let ack = Acknowledgement {
        run_id,
        title,
        tool,
        signal_on_completion: signal,
    };
    ToolOutcome::ok(match mode.as_ref().and_then(|m| m.formatter()) {
        Some(f) => f.acknowledgement(&ack),
        None => DefaultResultFormatter.acknowledgement(&ack),
    })
}
