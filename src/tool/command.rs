//! Command tools: `[tools.NAME]` in config.toml defines a tool that runs a command (argv,
//! never through a shell). Args reach it as JSON on stdin and in `TOOLQ_ARGS`; a run that
//! waited for other runs (`--after`, a batch's callback) finds their outcomes in the JSON file
//! named by `TOOLQ_PARENT_RESULTS`. It reports through the stdout line protocol in
//! `docs/command-tools.md`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::process::{self, Exit, ProcessSpec, Stopped};
use super::sink::{RunSink, escape_bytes};
use super::{Tool, ToolContext, ToolDef, ToolHints, ToolOutcome, ToolPolicy};
pub use crate::config::CommandToolConfig;
use crate::error::ConfigError;
use crate::run::Progress;

/// Args JSON longer than this is not put in `TOOLQ_ARGS` (Linux caps one environment string
/// at 128 KiB); it is always on stdin.
pub const MAX_ENV_ARGS: usize = 120 * 1024;

/// The environment variable naming the file that holds a run's parent results (only for a
/// run with parents).
pub const PARENT_RESULTS_ENV: &str = "TOOLQ_PARENT_RESULTS";

/// Prefix of protocol lines on a command's stdout.
pub const PROTOCOL_PREFIX: &[u8] = b"::toolq::";

/// The exit code by which a command snoozes (sysexits' `EX_TEMPFAIL`): the run is queued again
/// for later without using an attempt.
pub const SNOOZE_EXIT_CODE: i32 = 75;

/// Prefix of the stdout line that says how long a snoozing command waits (`toolq-snooze: 30s`).
pub const SNOOZE_PREFIX: &str = "toolq-snooze:";

/// How long a command that exits with [`SNOOZE_EXIT_CODE`] waits without a snooze line.
pub const DEFAULT_SNOOZE: std::time::Duration = std::time::Duration::from_secs(60);

/// The stdout lines the tool looks at: protocol lines (consumed) and snooze lines (logged).
const WATCHED: &[&[u8]] = &[PROTOCOL_PREFIX, SNOOZE_PREFIX.as_bytes()];

/// The command tools defined in a config's `[tools.NAME]` sections, ready to register.
pub fn command_tools(
    tools: &BTreeMap<String, CommandToolConfig>,
) -> Result<Vec<Arc<dyn Tool>>, ConfigError> {
    Ok(tools
        .values()
        .map(|c| Arc::new(CommandTool(c.clone())) as Arc<dyn Tool>)
        .collect())
}

/// A tool that runs a configured command.
#[derive(Debug, Clone)]
pub struct CommandTool(pub CommandToolConfig);

/// What the protocol lines of one run reported.
#[derive(Debug, Default)]
struct Reported {
    result: Option<Value>,
    error: Option<String>,
    /// The last `toolq-snooze:` line, as written (without its line end).
    snooze: Option<String>,
}

/// Notes a snooze line (it stays in the log); else applies a protocol line. Returns true
/// when the line was consumed (a protocol line).
fn watched_line(line: &[u8], sink: &RunSink, reported: &Mutex<Reported>) -> bool {
    if line.starts_with(SNOOZE_PREFIX.as_bytes()) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\n', '\r']).to_string();
        reported.lock().unwrap_or_else(|e| e.into_inner()).snooze = Some(text);
        return false;
    }
    protocol_line(line, sink, reported)
}

/// Applies one stdout line of the protocol; returns true when the line was a protocol line.
fn protocol_line(line: &[u8], sink: &RunSink, reported: &Mutex<Reported>) -> bool {
    let Some(rest) = line.strip_prefix(PROTOCOL_PREFIX) else {
        return false;
    };
    let text = String::from_utf8_lossy(rest);
    let text = text.trim_end_matches(['\n', '\r']);
    let (verb, payload) = text.split_once(' ').unwrap_or((text, ""));
    let mut r = reported.lock().unwrap_or_else(|e| e.into_inner());
    match verb {
        "status" => sink.status(payload),
        "progress" => {
            match serde_json::from_str::<Progress>(payload) {
                Ok(p) => sink.progress(p),
                Err(e) => {
                    sink.system(&format!("ignored protocol line (progress is not {{\"current\": N, ...}}: {e}): {text}"));
                }
            }
        }
        "result" => match serde_json::from_str::<Value>(payload) {
            Ok(v) => r.result = Some(v),
            Err(e) => sink.system(&format!(
                "ignored protocol line (result is not JSON: {e}): {text}"
            )),
        },
        "error" => r.error = Some(payload.to_string()),
        _ => {
            sink.system(&format!(
                "ignored protocol line (unknown verb {verb:?}; use status, progress, result or error): {text}"
            ));
        }
    }
    true
}

#[async_trait]
impl Tool for CommandTool {
    fn definition(&self) -> ToolDef {
        let c = &self.0;
        // Command tools run external programs: background-capable by design.
        let mut def = ToolDef::new(&c.name, &c.description, c.args_schema.clone())
            .hints(ToolHints::default().with_supports_background(true));
        def.timeout = c.timeout;
        def.approval_deadline = c.approval_deadline;
        if c.requires_approval {
            def = def.policy(ToolPolicy::RequiresApproval);
        }
        def
    }

    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        let c = &self.0;
        if let Some(cap) = c.output_cap {
            ctx.sink.limit_log(cap);
        }
        let args = ctx.args.to_string();
        let reported = Arc::new(Mutex::new(Reported::default()));
        let mut spec = ProcessSpec::new(c.command.clone());
        spec.cwd = c.cwd.clone();
        spec.env = c.env.clone().into_iter().collect();
        // Linux refuses to start a program with one environment string over 128 KiB; such
        // args arrive on stdin only.
        if args.len() <= MAX_ENV_ARGS {
            spec.env.push(("TOOLQ_ARGS".to_string(), args.clone()));
        } else {
            ctx.sink.system(&format!(
                "args are {} bytes, too big for TOOLQ_ARGS; they are on stdin only",
                args.len()
            ));
        }
        spec.env.extend([
            ("TOOLQ_RUN_ID".to_string(), ctx.run_id.to_string()),
            ("TOOLQ_SESSION_ID".to_string(), ctx.session_id.clone()),
            ("TOOLQ_ATTEMPT".to_string(), ctx.attempt.to_string()),
            ("TOOLQ_TOOL".to_string(), c.name.clone()),
            ("TOOLQ_TITLE".to_string(), ctx.title.clone()),
        ]);
        // Kept until the command has exited, then removed.
        let parents = match ParentResults::write(&ctx).await {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        if let Some(p) = &parents {
            spec.env
                .push((PARENT_RESULTS_ENV.to_string(), p.path.display().to_string()));
        }
        spec.stdin = args.into_bytes();
        spec.kill_grace = c.kill_grace;
        let (sink, rep) = (ctx.sink.clone(), reported.clone());
        spec.stdout_filter = Some((
            WATCHED,
            Box::new(move |line| watched_line(line, &sink, &rep)),
        ));
        let out = match process::run(spec, &ctx.sink, &ctx.cancel).await {
            Ok(o) => o,
            Err(e) => return ToolOutcome::tool_error(format!("command tool {:?}: {e}", c.name)),
        };
        drop(parents);
        let rep = std::mem::take(&mut *reported.lock().unwrap_or_else(|e| e.into_inner()));
        outcome_of(&c.name, out, rep)
    }
}

/// The file of a run's parent results (`TOOLQ_PARENT_RESULTS`): the JSON array of
/// [`crate::run::LinkedResult`]s that `ctx.parent_results()` returns, written to the temp dir
/// (`TMPDIR`) readable by this user only, and removed when dropped.
struct ParentResults {
    path: std::path::PathBuf,
}

impl ParentResults {
    /// The file for `ctx`'s run, or `None` when it has no parents. A failed read or write is
    /// an internal error (retried): the command would run without what it waited for.
    async fn write(ctx: &ToolContext) -> Result<Option<ParentResults>, ToolOutcome> {
        let parents = ctx
            .parent_results()
            .await
            .map_err(|e| ToolOutcome::Internal(format!("reading the run's parent results: {e}")))?;
        if parents.is_empty() {
            return Ok(None);
        }
        let text = serde_json::to_vec(&parents)
            .map_err(|e| ToolOutcome::Internal(format!("encoding the parent results: {e}")))?;
        let path = std::env::temp_dir().join(format!(
            "toolq-parents-{}-{:016x}.json",
            ctx.run_id,
            rand::random::<u64>()
        ));
        let file = ParentResults { path };
        let mut open = tokio::fs::OpenOptions::new();
        // A fresh name, never an existing file (or a link someone left in a shared /tmp).
        open.write(true).create_new(true).mode(0o600);
        let written = async {
            let mut f = open.open(&file.path).await?;
            tokio::io::AsyncWriteExt::write_all(&mut f, &text).await?;
            tokio::io::AsyncWriteExt::flush(&mut f).await
        };
        written.await.map_err(|e| {
            ToolOutcome::Internal(format!(
                "writing the parent results to {}: {e}",
                file.path.display()
            ))
        })?;
        Ok(Some(file))
    }
}

impl Drop for ParentResults {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn outcome_of(name: &str, out: process::ProcessOutput, rep: Reported) -> ToolOutcome {
    match out.stopped {
        Some(Stopped::Cancelled) => return ToolOutcome::tool_error("command cancelled"),
        Some(Stopped::TimedOut) => return ToolOutcome::tool_error("command timed out"),
        None => {}
    }
    if let Some(e) = rep.error {
        return ToolOutcome::tool_error(e);
    }
    match out.exit {
        Exit::Code(0) => ToolOutcome::ok(rep.result.unwrap_or_else(
            || json!({"exit_code": 0, "stdout_tail": escape_bytes(&out.stdout_tail)}),
        )),
        Exit::Code(SNOOZE_EXIT_CODE) => snooze_of(name, rep.snooze.as_deref()),
        Exit::Code(code) => {
            ToolOutcome::tool_error(format!("command tool {name:?} exited with code {code}"))
        }
        Exit::Signal(sig) => {
            ToolOutcome::tool_error(format!("command tool {name:?} was killed by signal {sig}"))
        }
    }
}

/// A snooze for the duration in the command's last snooze line (60 s without one), or the
/// tool error naming a line whose duration does not parse.
fn snooze_of(name: &str, line: Option<&str>) -> ToolOutcome {
    let Some(line) = line else {
        return ToolOutcome::snooze(DEFAULT_SNOOZE);
    };
    let text = line.strip_prefix(SNOOZE_PREFIX).unwrap_or(line).trim();
    match crate::clock::parse_duration(text) {
        Ok(d) => ToolOutcome::snooze(d),
        Err(reason) => ToolOutcome::tool_error(format!(
            "command tool {name:?} exited with code {SNOOZE_EXIT_CODE} to snooze, but its line \
             {line:?} does not give a duration: {text:?} {reason}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Parses `text` whose tables are tools (`[t]` stands for `[tools.t]`).
    fn parse(text: &str) -> Result<BTreeMap<String, CommandToolConfig>, ConfigError> {
        let text: String = text
            .lines()
            .map(|l| match l.strip_prefix('[') {
                Some(rest) => format!("[tools.{rest}\n"),
                None => format!("{l}\n"),
            })
            .collect();
        crate::config::Config::parse(&text, "c.toml").map(|c| c.tools)
    }

    #[test]
    fn a_full_entry_parses() {
        let t = parse(
            "[check]\ncommand = [\"/bin/check\", \"--fast\"]\ntimeout = \"30s\"\nrequires_approval = true\n\
             env = { A = \"1\" }\nargs_schema = { type = \"object\", required = [\"host\"] }\n",
        )
        .unwrap();
        let c = &t["check"];
        assert_eq!(c.command, ["/bin/check", "--fast"]);
        assert_eq!(c.timeout, Some(Duration::from_secs(30)));
        assert!(c.requires_approval);
        assert_eq!(c.args_schema["required"][0], "host");
        let t = parse("[j]\ncommand = [\"x\"]\nargs_schema = '{\"type\": \"object\"}'\n").unwrap();
        assert_eq!(t["j"].args_schema, json!({"type": "object"}));
        // Command tools run external programs: background-capable by design.
        let def = CommandTool(t["j"].clone()).definition();
        assert!(def.hints.supports_background);
    }

    #[test]
    fn bad_entries_name_the_key() {
        let e = parse("[t]\ncommand = []\n").unwrap_err().to_string();
        assert!(e.contains("tools.t.command"), "{e}");
        let e = parse("[t]\ncommand = [\"x\"]\ncomand = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("comand") && e.contains("tools.t"), "{e}");
        let e = parse("[t]\ncommand = [\"x\"]\ntimeout = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tools.t.timeout") && e.contains("soon"), "{e}");
        let e = parse("[t]\ncommand = [\"x\"]\nargs_schema = { type = 5 }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tools.t.args_schema"), "{e}");
        let e = parse("[\"a b\"]\ncommand = [\"x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"a b\""), "{e}");
    }

    #[test]
    fn protocol_lines_are_applied_and_consumed() {
        let sink = RunSink::new(Default::default());
        let rep = Mutex::new(Reported::default());
        assert!(protocol_line(b"::toolq::status half way\n", &sink, &rep));
        assert!(protocol_line(
            b"::toolq::progress {\"current\": 5, \"total\": 10}\n",
            &sink,
            &rep
        ));
        assert!(protocol_line(
            b"::toolq::result {\"ok\": true}\n",
            &sink,
            &rep
        ));
        assert!(protocol_line(b"::toolq::result nope\n", &sink, &rep));
        assert!(!protocol_line(b"plain line\n", &sink, &rep));
        let snap = sink.final_snapshot();
        assert_eq!(snap.status_text.as_deref(), Some("half way"));
        assert!(snap.progress.unwrap().contains("\"total\":10.0"));
        assert_eq!(rep.lock().unwrap().result, Some(json!({"ok": true})));
        let log = String::from_utf8(snap.log.unwrap().0).unwrap();
        assert!(log.contains("result is not JSON"), "{log}");
    }

    fn exited(code: i32) -> process::ProcessOutput {
        process::ProcessOutput {
            exit: Exit::Code(code),
            stopped: None,
            stdout_tail: Vec::new(),
            bytes_read: 0,
        }
    }

    #[test]
    fn exit_75_snoozes_for_the_last_snooze_line() {
        let sink = RunSink::new(Default::default());
        let rep = Mutex::new(Reported::default());
        assert!(
            !watched_line(b"toolq-snooze: 5s\n", &sink, &rep),
            "kept in the log"
        );
        assert!(!watched_line(b"toolq-snooze: 100ms\r\n", &sink, &rep));
        let rep = rep.into_inner().unwrap();
        assert_eq!(rep.snooze.as_deref(), Some("toolq-snooze: 100ms"));
        match outcome_of("poll", exited(75), rep) {
            ToolOutcome::Snooze(d) => assert_eq!(d, Duration::from_millis(100)),
            o => panic!("{o:?}"),
        }
        match outcome_of("poll", exited(75), Reported::default()) {
            ToolOutcome::Snooze(d) => assert_eq!(d, DEFAULT_SNOOZE),
            o => panic!("{o:?}"),
        }
        // The line means nothing without the exit code.
        let rep = Reported {
            snooze: Some("toolq-snooze: 5s".into()),
            ..Default::default()
        };
        assert!(matches!(
            outcome_of("poll", exited(1), rep),
            ToolOutcome::ToolError(_)
        ));
        // An error line wins over a snooze.
        let rep = Reported {
            error: Some("broken".into()),
            ..Default::default()
        };
        assert!(
            matches!(outcome_of("poll", exited(75), rep), ToolOutcome::ToolError(e) if e == "broken")
        );
    }

    #[test]
    fn a_bad_snooze_duration_is_a_tool_error_naming_the_line() {
        for line in ["toolq-snooze: soon", "toolq-snooze:", "toolq-snooze: 2M"] {
            let rep = Reported {
                snooze: Some(line.into()),
                ..Default::default()
            };
            match outcome_of("poll", exited(75), rep) {
                ToolOutcome::ToolError(e) => {
                    assert!(
                        e.contains(&format!("{line:?}")) && e.contains("\"poll\""),
                        "{e}"
                    )
                }
                o => panic!("{o:?}"),
            }
        }
    }
}
