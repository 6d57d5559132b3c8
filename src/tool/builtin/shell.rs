//! `shell`: runs a command given in the args (argv, cwd, env, stdin, timeout) with the
//! process runner. Registered only when `[shell] enabled = true`; `allowed_programs` limits
//! `argv[0]` (checked by the schema at enqueue, and again before running).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::ShellConfig;
use crate::tool::process::{self, Exit, ProcessSpec, Stopped};
use crate::tool::sink::escape_bytes;
use crate::tool::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome};

/// Runs a command from its args; only registered when the config enables it.
#[derive(Debug, Clone)]
pub struct Shell {
    allowed: Vec<String>,
}

impl Shell {
    /// The tool under `config` (its allowed programs).
    pub fn new(config: &ShellConfig) -> Self {
        Self {
            allowed: config.allowed_programs.clone(),
        }
    }
}

/// The schema of a command's argv, restricted to `allowed` programs when not empty.
pub(crate) fn argv_schema(allowed: &[String]) -> Value {
    let mut argv = json!({"type": "array", "items": {"type": "string"}, "minItems": 1});
    if !allowed.is_empty() {
        argv["prefixItems"] = json!([{"enum": allowed}]);
    }
    argv
}

/// Checks `argv[0]` against the allowed programs (empty list: any).
pub(crate) fn check_program(allowed: &[String], argv: &[String]) -> Result<(), String> {
    match argv.first() {
        None => Err("argv must name a program".into()),
        Some(p) if !allowed.is_empty() && !allowed.contains(p) => Err(format!(
            "program {p:?} is not allowed by [shell] allowed_programs ({})",
            allowed.join(", ")
        )),
        Some(_) => Ok(()),
    }
}

#[derive(Debug, Deserialize)]
struct Args {
    argv: Vec<String>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    stdin: String,
    timeout_ms: Option<u64>,
}

#[async_trait]
impl Tool for Shell {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "shell",
            "Runs a program (argv, no shell interpolation) with optional cwd, env, stdin and \
             timeout_ms; stdout and stderr go to the log; a non-zero exit is an error.",
            json!({
                "type": "object",
                "properties": {
                    "argv": argv_schema(&self.allowed),
                    "cwd": {"type": "string"},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "stdin": {"type": "string"},
                    "timeout_ms": {"type": "integer", "minimum": 1}
                },
                "required": ["argv"],
                "additionalProperties": false
            }),
        )
        .display_name("Shell")
        .hints(ToolHints::default().with_supports_background(true))
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let args: Args = match serde_json::from_value(ctx.args.clone()) {
            Ok(a) => a,
            Err(e) => return ToolOutcome::tool_error(format!("bad shell args: {e}")),
        };
        if let Err(e) = check_program(&self.allowed, &args.argv) {
            return ToolOutcome::tool_error(e);
        }
        let mut spec = ProcessSpec::new(args.argv);
        spec.cwd = args.cwd.map(Into::into);
        spec.env = args.env.into_iter().collect();
        spec.stdin = args.stdin.into_bytes();
        spec.timeout = args.timeout_ms.map(Duration::from_millis);
        spec.kill_grace = Duration::from_secs(2);
        let out = match process::run(spec, &ctx.sink, &ctx.cancel).await {
            Ok(o) => o,
            Err(e) => return ToolOutcome::tool_error(e.to_string()),
        };
        match (out.stopped, out.exit) {
            (Some(Stopped::TimedOut), _) => ToolOutcome::tool_error(format!(
                "command timed out after {} ms",
                args.timeout_ms.unwrap_or_default()
            )),
            (Some(Stopped::Cancelled), _) => ToolOutcome::tool_error("command cancelled"),
            (None, Exit::Code(0)) => ToolOutcome::ok(json!({
                "exit_code": 0,
                "stdout_tail": escape_bytes(&out.stdout_tail),
            })),
            (None, Exit::Code(c)) => {
                ToolOutcome::tool_error(format!("command exited with code {c}"))
            }
            (None, Exit::Signal(s)) => {
                ToolOutcome::tool_error(format!("command was killed by signal {s}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_programs_are_enforced() {
        let allowed = vec!["echo".to_string()];
        assert!(check_program(&allowed, &["echo".into()]).is_ok());
        let e = check_program(&allowed, &["rm".into()]).unwrap_err();
        assert!(e.contains("\"rm\""), "{e}");
        assert!(check_program(&[], &["anything".into()]).is_ok());
        let v = jsonschema::validator_for(&argv_schema(&allowed)).unwrap();
        assert!(v.is_valid(&json!(["echo", "x"])));
        assert!(!v.is_valid(&json!(["rm", "-rf"])));
    }
}
