//! `detached_command`: an async tool. It starts a command as a detached operation (its own
//! process group, state in `<state_dir>/<operation id>/`), stores the operation id on the run,
//! and watches it: output files stream into the log, each stage goes to the run's stage
//! history. A later attempt (after a crash and rescue, or a timeout) gets the operation id
//! back and resumes watching instead of starting the command again. Registered with `shell`.
//!
//! It is an [`AsyncTool`] (registered through [`crate::tool::AsyncAdapter`]): `execute` starts
//! the supervisor, `check_status` follows the state directory, `cancel` ends the process group;
//! the adapter stores the operation id, the stages and the resume rule.
//!
//! The command may report stages itself by writing a line to `$TOOLQ_OPERATION_DIR/stage`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use futures_util::Stream as StatusStream;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::shell::{argv_schema, check_program};
use crate::config::ShellConfig;
use crate::tool::async_tool::AsyncError;
use crate::tool::sink::{Stream, escape_bytes};
use crate::tool::{
    AsyncOutcome, AsyncTool, ProgressStage, ToolContext, ToolDef, ToolHints, ToolStatus,
};

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

impl DetachedCommand {
    fn args(input: &Value) -> Result<Args, String> {
        serde_json::from_value(input.clone()).map_err(|e| format!("bad detached_command args: {e}"))
    }

    /// Starts the supervisor in its own process group; returns the operation id and pid.
    async fn start(&self, ctx: &ToolContext, args: &Args) -> Result<(String, Option<u32>), String> {
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
        let pid = child.id();
        // Dropping the handle leaves the process running; tokio reaps it when it exits.
        drop(child);
        Ok((op, pid))
    }
}

/// A stage the command reported (the text it wrote to `$TOOLQ_OPERATION_DIR/stage`).
#[derive(Debug, Clone)]
pub struct CommandStage(String);

impl ProgressStage for CommandStage {
    fn as_str(&self) -> &str {
        &self.0
    }
}

/// What the watch loop carries from one poll to the next.
struct Watch<'a> {
    ctx: &'a ToolContext,
    op: String,
    dir: PathBuf,
    out: Follow,
    err: Follow,
    last_stage: String,
    poll: Duration,
    done: bool,
}

impl Watch<'_> {
    /// Polls until there is something to report: a new stage, or the end.
    async fn next(&mut self) -> Option<ToolStatus<CommandStage>> {
        if self.done {
            return None;
        }
        if !self.dir.is_dir() {
            self.done = true;
            return Some(ToolStatus::Failed(format!(
                "operation {} has no state in {}; it cannot be resumed",
                self.op,
                self.dir
                    .parent()
                    .map_or("-".into(), |p| p.display().to_string())
            )));
        }
        loop {
            self.out.pump(self.ctx).await;
            self.err.pump(self.ctx).await;
            if let Some(stage) = self.new_stage().await {
                return Some(stage);
            }
            if let Ok(code) = tokio::fs::read_to_string(self.dir.join("exit")).await {
                return Some(self.ended(&code).await);
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// The stage the command wrote to its `stage` file, when it is not blank and not the one
    /// reported last.
    async fn new_stage(&mut self) -> Option<ToolStatus<CommandStage>> {
        let s = tokio::fs::read_to_string(self.dir.join("stage"))
            .await
            .ok()?;
        let s = s.trim().to_string();
        if s.is_empty() || s == self.last_stage {
            return None;
        }
        self.last_stage = s.clone();
        Some(ToolStatus::Progress {
            stage: CommandStage(s.clone()),
            message: s,
            progress: None,
        })
    }

    /// The end, once the supervisor wrote the exit `code`: the rest of the output goes to the
    /// log; a non-zero code fails, zero completes with the stdout tail.
    async fn ended(&mut self, code: &str) -> ToolStatus<CommandStage> {
        self.done = true;
        self.out.rest(self.ctx).await;
        self.err.rest(self.ctx).await;
        let code: i32 = code.trim().parse().unwrap_or(-1);
        if code != 0 {
            return ToolStatus::Failed(format!("operation {} exited with code {code}", self.op));
        }
        let tail = tokio::fs::read(self.dir.join("stdout"))
            .await
            .unwrap_or_default();
        let from = tail.len().saturating_sub(4096);
        ToolStatus::completed(json!({
            "operation_id": self.op,
            "exit_code": 0,
            "stdout_tail": escape_bytes(&tail[from..]),
        }))
    }
}

impl AsyncTool for DetachedCommand {
    type Stage = CommandStage;

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
        .hints(ToolHints::default().with_supports_background(true))
    }

    async fn execute(&self, ctx: &ToolContext, input: Value) -> Result<AsyncOutcome, AsyncError> {
        let args = match Self::args(&input) {
            Ok(a) => a,
            Err(e) => return Ok(AsyncOutcome::Failed(e)),
        };
        if let Err(e) = check_program(&self.allowed, &args.argv) {
            return Ok(AsyncOutcome::Failed(e));
        }
        Ok(match self.start(ctx, &args).await {
            Ok((op, pid)) => {
                let pid = pid.map_or("-".into(), |p| p.to_string());
                AsyncOutcome::in_progress(op, format!("started (pid {pid})"))
            }
            Err(e) => AsyncOutcome::Failed(e),
        })
    }

    fn check_status(
        &self,
        ctx: &ToolContext,
        operation_id: &str,
    ) -> impl StatusStream<Item = ToolStatus<CommandStage>> + Send {
        let dir = self.state_dir.join(operation_id);
        let poll = Self::args(&ctx.args).map_or(default_poll(), |a| a.poll_ms);
        let follow = |name: &str, stream| Follow {
            path: dir.join(name),
            offset: 0,
            stream,
        };
        let watch = Watch {
            ctx,
            op: operation_id.to_string(),
            out: follow("stdout", Stream::Stdout),
            err: follow("stderr", Stream::Stderr),
            dir: dir.clone(),
            last_stage: String::new(),
            poll: Duration::from_millis(poll),
            done: false,
        };
        ctx.sink
            .status(format!("watching operation {operation_id}"));
        futures_util::stream::unfold(watch, |mut w| async move {
            let item = w.next().await?;
            Some((item, w))
        })
    }

    /// An operator's cancel ends the operation's process group.
    async fn cancel(&self, _ctx: &ToolContext, operation_id: &str) {
        let dir = self.state_dir.join(operation_id);
        if let Some(pid) = tokio::fs::read_to_string(dir.join("pid"))
            .await
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            // The supervisor leads the operation's group; ESRCH means it already ended.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }
}
