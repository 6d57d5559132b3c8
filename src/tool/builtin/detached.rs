//! `detached_command`: an async tool. It starts a command as a detached operation (its own
//! process group, state in `<state_dir>/<operation id>/`), stores the operation id on the run,
//! and watches it: output files stream into the log, each stage goes to the run's stage
//! history. A later attempt (after a crash and rescue, or a timeout) gets the operation id
//! back and resumes watching instead of starting the command again. Registered with `shell`.
//!
//! It shares the stage records and the cancel-or-detach rule of [`crate::tool::AsyncTool`]
//! (see `tool::async_tool`), whose adapter works the same way for Rust-defined operations.
//!
//! The command may report stages itself by writing a line to `$TOOLQ_OPERATION_DIR/stage`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::shell::{argv_schema, check_program};
use crate::config::ShellConfig;
use crate::tool::async_tool::{operator_cancelled, stage_record};
use crate::tool::sink::{Stream, escape_bytes};
use crate::tool::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome};

/// The supervisor: records its pid, runs the command ("$@", never re-parsed), then records
/// the exit code atomically (write, then rename).
const SUPERVISOR: &str = r#"dir=$1; shift
echo $$ > "$dir/pid"
"$@" < /dev/null > "$dir/stdout" 2> "$dir/stderr"
echo $? > "$dir/exit.tmp" && mv "$dir/exit.tmp" "$dir/exit""#;

/// Starts and watches detached commands.
#[derive(Debug, Clone)]
pub struct DetachedCommand {
    allowed: Vec<String>,
    state_dir: PathBuf,
}

impl DetachedCommand {
    /// The tool under `config`, keeping operation state in `state_dir`.
    pub fn new(config: &ShellConfig, state_dir: PathBuf) -> Self {
        Self {
            allowed: config.allowed_programs.clone(),
            state_dir,
        }
    }
}

#[derive(Debug, Deserialize)]
struct Args {
    argv: Vec<String>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default = "default_poll")]
    poll_ms: u64,
}

fn default_poll() -> u64 {
    200
}

/// Follows one output file from an offset.
struct Follow {
    path: PathBuf,
    offset: u64,
    stream: Stream,
}

impl Follow {
    async fn pump(&mut self, ctx: &ToolContext) {
        let Ok(mut f) = tokio::fs::File::open(&self.path).await else {
            return;
        };
        if f.seek(std::io::SeekFrom::Start(self.offset)).await.is_err() {
            return;
        }
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = f.read(&mut buf).await {
            if n == 0 {
                break;
            }
            // Whole lines only; a partial line waits for the next pass (or the end).
            let upto = match buf[..n].iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None if n == buf.len() => n,
                None => break,
            };
            ctx.sink.output_lines(self.stream, &buf[..upto]);
            self.offset += upto as u64;
            if upto < n {
                break;
            }
        }
    }

    async fn rest(&mut self, ctx: &ToolContext) {
        self.pump(ctx).await;
        if let Ok(bytes) = tokio::fs::read(&self.path).await {
            let from = (self.offset as usize).min(bytes.len());
            ctx.sink.output_lines(self.stream, &bytes[from..]);
        }
    }
}

fn stage(ctx: &ToolContext, name: &str, extra: Value) -> Value {
    stage_record(ctx, name, None, extra)
}

impl DetachedCommand {
    async fn start(&self, ctx: &ToolContext, args: &Args) -> Result<(String, PathBuf), String> {
        let op = format!("op_{}", uuid::Uuid::now_v7().simple());
        let dir = self.state_dir.join(&op);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(SUPERVISOR)
            .arg("sh")
            .arg(&dir)
            .args(&args.argv)
            .envs(&args.env)
            .env("TOOLQ_OPERATION_DIR", &dir)
            .env("TOOLQ_RUN_ID", ctx.run_id.as_str())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: it outlives this worker and is not hit by the worker's signals.
            .process_group(0)
            .kill_on_drop(false);
        if let Some(cwd) = &args.cwd {
            cmd.current_dir(cwd);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", args.argv[0]))?;
        // Recorded at once: if this worker dies now, the next attempt resumes this operation.
        ctx.sink
            .set_operation(&op, Some(stage(ctx, "started", json!({"pid": child.id()}))));
        // Dropping the handle leaves the process running; tokio reaps it when it exits.
        drop(child);
        Ok((op, dir))
    }

    /// Watches until the operation exits, or the run is stopped.
    async fn watch(&self, ctx: &ToolContext, op: &str, dir: &Path, poll: Duration) -> ToolOutcome {
        let mut out = Follow {
            path: dir.join("stdout"),
            offset: 0,
            stream: Stream::Stdout,
        };
        let mut err = Follow {
            path: dir.join("stderr"),
            offset: 0,
            stream: Stream::Stderr,
        };
        let mut last_stage = String::new();
        ctx.sink.status(format!("watching operation {op}"));
        loop {
            out.pump(ctx).await;
            err.pump(ctx).await;
            if let Ok(s) = tokio::fs::read_to_string(dir.join("stage")).await {
                let s = s.trim().to_string();
                if !s.is_empty() && s != last_stage {
                    ctx.sink.stage(stage(ctx, &s, json!({})));
                    ctx.sink.status(s.clone());
                    last_stage = s;
                }
            }
            if let Ok(code) = tokio::fs::read_to_string(dir.join("exit")).await {
                out.rest(ctx).await;
                err.rest(ctx).await;
                let code: i32 = code.trim().parse().unwrap_or(-1);
                let name = if code == 0 { "completed" } else { "failed" };
                ctx.sink.stage(stage(ctx, name, json!({"exit_code": code})));
                if code != 0 {
                    return ToolOutcome::tool_error(format!(
                        "operation {op} exited with code {code}"
                    ));
                }
                let tail = tokio::fs::read(dir.join("stdout"))
                    .await
                    .unwrap_or_default();
                let from = tail.len().saturating_sub(4096);
                return ToolOutcome::ok(json!({
                    "operation_id": op,
                    "exit_code": 0,
                    "stdout_tail": escape_bytes(&tail[from..]),
                }));
            }
            tokio::select! {
                _ = tokio::time::sleep(poll) => {}
                _ = ctx.cancel.cancelled() => return self.stopped(ctx, op, dir).await,
            }
        }
    }

    /// An operator's cancel ends the operation; a shutdown, timeout or lost lease leaves it
    /// running for the next attempt to resume.
    async fn stopped(&self, ctx: &ToolContext, op: &str, dir: &Path) -> ToolOutcome {
        if !operator_cancelled(ctx).await {
            ctx.sink.stage(stage(ctx, "detached", json!({})));
            return ToolOutcome::tool_error(format!(
                "stopped watching operation {op}; it keeps running and the next attempt resumes it"
            ));
        }
        if let Some(pid) = tokio::fs::read_to_string(dir.join("pid"))
            .await
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            // The supervisor leads the operation's group; ESRCH means it already ended.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGTERM);
        }
        ctx.sink.stage(stage(ctx, "cancelled", json!({})));
        ToolOutcome::tool_error(format!("operation {op} cancelled"))
    }
}

#[async_trait]
impl Tool for DetachedCommand {
    fn definition(&self) -> ToolDef {
        ToolDef::new(
            "detached_command",
            "Starts a program (argv) as a detached operation that survives worker restarts, \
             and watches it to its end; stdout/stderr go to the log, stages to the run.",
            json!({
                "type": "object",
                "properties": {
                    "argv": argv_schema(&self.allowed),
                    "cwd": {"type": "string"},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "poll_ms": {"type": "integer", "minimum": 10, "maximum": 60000}
                },
                "required": ["argv"],
                "additionalProperties": false
            }),
        )
        .display_name("Detached command")
        .hints(ToolHints::default())
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let args: Args = match serde_json::from_value(ctx.args.clone()) {
            Ok(a) => a,
            Err(e) => return ToolOutcome::tool_error(format!("bad detached_command args: {e}")),
        };
        if let Err(e) = check_program(&self.allowed, &args.argv) {
            return ToolOutcome::tool_error(e);
        }
        let poll = Duration::from_millis(args.poll_ms);
        let (op, dir) = match &ctx.operation_id {
            Some(op) => {
                let dir = self.state_dir.join(op);
                if !dir.is_dir() {
                    return ToolOutcome::tool_error(format!(
                        "operation {op} has no state in {}; it cannot be resumed",
                        self.state_dir.display()
                    ));
                }
                ctx.sink
                    .set_operation(op.clone(), Some(stage(&ctx, "resumed", json!({}))));
                (op.clone(), dir)
            }
            None => match self.start(&ctx, &args).await {
                Ok(x) => x,
                Err(e) => return ToolOutcome::tool_error(e),
            },
        };
        self.watch(&ctx, &op, &dir, poll).await
    }
}
