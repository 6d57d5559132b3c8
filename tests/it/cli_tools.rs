//! The tool-runtime CLI: approve / deny, `logs --follow`, `inbox --follow`, and command tools
//! defined in a config file, all through the real `toolq` binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

struct Cli {
    db: crate::support::TestDb,
    config: PathBuf,
}

impl Cli {
    fn new(dir: &Path, config: &str) -> Self {
        let cfg = dir.join("config.toml");
        std::fs::write(&cfg, config).unwrap();
        Cli {
            db: crate::support::TestDb::at(dir),
            config: cfg,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_toolq"));
        c.arg("--db")
            .arg(&self.db)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("RUST_LOG");
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        let o: Output = self.cmd(args).output().unwrap();
        assert!(
            o.status.success(),
            "toolq {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    fn enqueue(&self, tool: &str, session: &str) -> String {
        self.json(&["enqueue", tool, "--session", session])["run_id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Starts a long-running command with stdout read line by line into a channel.
    fn spawn_lines(&self, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
        let mut child = self
            .cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (child, rx)
    }
}

/// Receives lines until one contains `needle`; returns all lines read.
fn until(rx: &mpsc::Receiver<String>, needle: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(l) => {
                let hit = l.contains(needle);
                seen.push(l);
                if hit {
                    return seen;
                }
            }
            Err(e) => panic!("no line containing {needle:?} ({e}); seen: {seen:?}"),
        }
    }
}

#[test]
fn approve_and_deny_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(
        dir.path(),
        "[tools.deploy]\ncommand = [\"sh\", \"-c\", \"echo deployed\"]\nrequires_approval = true\n",
    );
    let a = cli.enqueue("deploy", "ops");
    let b = cli.enqueue("deploy", "ops");
    cli.ok(&["worker", "--drain"]);
    assert_eq!(cli.json(&["show", &a])["state"], "awaiting_approval");
    let v = cli.json(&["approve", &a, "--by", "alice", "--note", "window open"]);
    assert_eq!(v["state"], "queued");
    let v = cli.json(&["deny", &b, "--by", "bob", "--reason", "freeze"]);
    assert_eq!(v["state"], "cancelled");
    cli.ok(&["worker", "--drain"]);
    let v = cli.json(&["show", &a]);
    assert_eq!(v["state"], "completed");
    assert_eq!(v["approval_by"], "alice");
    assert_eq!(v["approval_note"], "window open");
    let v = cli.json(&["show", &b]);
    assert_eq!(v["state"], "cancelled");
    assert_eq!(v["approval_state"], "denied");
    // Approving a finished run is a conflict: exit 1 with the state named.
    let o = cli.cmd(&["approve", &a]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("completed"));
    let inbox = cli.ok(&["inbox", "ops"]);
    assert!(
        inbox.contains("approval_request") && inbox.contains("freeze"),
        "{inbox}"
    );
}

#[test]
fn logs_follow_streams_until_the_run_ends() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let cli = Cli::new(
        dir.path(),
        &format!(
            "[worker]\nflush_interval = \"50ms\"\npoll_interval = \"50ms\"\n\
             [tools.slow]\ncommand = [\"sh\", \"-c\", \"echo first; while [ ! -e \\\"$1\\\" ]; do sleep 0.05; done; echo last\", \"sh\", {:?}]\n",
            go.to_str().unwrap()
        ),
    );
    let id = cli.enqueue("slow", "s");
    let (mut follower, lines) = cli.spawn_lines(&["logs", &id, "--follow"]);
    let mut worker = cli
        .cmd(&["worker", "--drain"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let seen = until(&lines, "[stdout] first");
    assert!(!seen.iter().any(|l| l.contains("last")));
    std::fs::write(&go, "").unwrap();
    until(&lines, "[stdout] last");
    assert!(
        follower.wait().unwrap().success(),
        "follow ends with the run"
    );
    assert!(worker.wait().unwrap().success());
}

#[test]
fn inbox_follow_prints_new_messages_as_they_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(dir.path(), "");
    cli.ok(&["init"]);
    let (mut follower, lines) = cli.spawn_lines(&["--json", "inbox", "watch", "--follow"]);
    let id = cli.json(&["enqueue", "get_current_time", "--session", "watch"])["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    cli.ok(&["worker", "--drain"]);
    let seen = until(&lines, &id);
    let msg: Value = serde_json::from_str(seen.last().unwrap()).unwrap();
    assert_eq!(msg["kind"], "completed");
    assert_eq!(msg["run_id"], id.as_str());
    follower.kill().unwrap();
    follower.wait().unwrap();
}

#[test]
fn a_detached_operation_survives_kill_9_of_its_worker_and_is_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let (starts, go) = (dir.path().join("starts"), dir.path().join("go"));
    let cli = Cli::new(
        dir.path(),
        &format!(
            "[worker]\nflush_interval = \"50ms\"\npoll_interval = \"50ms\"\n\
             [shell]\nenabled = true\nstate_dir = {:?}\n",
            dir.path().join("ops").to_str().unwrap()
        ),
    );
    let args = serde_json::json!({
        "argv": ["sh", "-c",
            "echo x >> \"$1\"; while [ ! -e \"$2\" ]; do sleep 0.02; done; echo finished",
            "sh", starts.to_str().unwrap(), go.to_str().unwrap()],
        "poll_ms": 20
    })
    .to_string();
    let id = cli.json(&["enqueue", "detached_command", "--args", &args])["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut worker = cli.cmd(&["worker"]).stderr(Stdio::null()).spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while cli.json(&["show", &id])["operation_id"].is_null() {
        assert!(
            std::time::Instant::now() < deadline,
            "operation id never stored"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    worker.kill().unwrap(); // SIGKILL
    worker.wait().unwrap();

    // The next worker notices the dead owner (same host, pid gone) and rescues the run; the
    // new attempt resumes the operation.
    std::fs::write(&go, "").unwrap();
    cli.ok(&["worker", "--drain"]);
    let v = cli.json(&["show", &id]);
    assert_eq!(v["state"], "completed", "{v}");
    assert_eq!(std::fs::read_to_string(&starts).unwrap().lines().count(), 1);
    let stages = v["stages"].to_string();
    assert!(
        stages.contains("resumed") && stages.contains("completed"),
        "{stages}"
    );
}

#[test]
fn an_approval_requirement_for_an_unknown_tool_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(dir.path(), "[approvals]\nrequire = [\"deplyo\"]\n");
    let o = cli.cmd(&["runs"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("approvals.require") && e.contains("deplyo"),
        "{e}"
    );
}

/// Issue 40 item 6 through the binary: `enqueue` and `enqueue --file` of a tool that requires
/// approval leave the run `awaiting_approval`, so `approve` right after works; `cancel` of a
/// waiting run is a cancel, not a denial.
#[test]
fn approve_right_after_enqueue_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(
        dir.path(),
        "[tools.deploy]\ncommand = [\"sh\", \"-c\", \"echo deployed\"]\nrequires_approval = true\n",
    );
    let a = cli.enqueue("deploy", "ops");
    let v = cli.json(&["show", &a]);
    assert_eq!(v["state"], "awaiting_approval", "{v}");
    assert_eq!(v["attempt"], 0, "{v}");
    assert!(v["started_at"].is_null(), "{v}");
    let text = cli.ok(&["show", &a]);
    assert!(text.contains("pending (no deadline)"), "{text}");
    let file = dir.path().join("runs.jsonl");
    std::fs::write(
        &file,
        "{\"tool\":\"deploy\",\"session\":\"ops\"}\n{\"tool\":\"echo\",\"args\":{\"message\":\"x\"},\"session\":\"ops\"}\n",
    )
    .unwrap();
    let ids = cli.json(&["enqueue", "--file", file.to_str().unwrap()]);
    let ids: Vec<String> = ids["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap().to_string())
        .collect();
    assert_eq!(cli.json(&["show", &ids[0]])["state"], "awaiting_approval");
    assert_eq!(cli.json(&["show", &ids[1]])["state"], "queued");
    let listed = cli.ok(&["runs", "--state", "awaiting_approval"]);
    assert!(listed.contains(&a) && listed.contains(&ids[0]), "{listed}");
    let v = cli.json(&["approve", &a, "--by", "alice"]);
    assert_eq!(v["state"], "queued", "{v}");
    let v = cli.json(&["cancel", &ids[0]]);
    assert_eq!(v["state"], "cancelled", "{v}");
    let v = cli.json(&["show", &ids[0]]);
    assert_eq!(v["state"], "cancelled", "{v}");
    assert_ne!(v["approval_state"], "denied", "{v}");
    cli.ok(&["worker", "--drain"]);
    let v = cli.json(&["show", &a]);
    assert_eq!(
        (v["state"].as_str(), v["attempt"].as_i64()),
        (Some("completed"), Some(1))
    );
    let stats = cli.json(&["stats"]);
    assert!(stats.to_string().contains("awaiting_approval"), "{stats}");
}
