//! Command tools and the shell built-in with real child processes: protocol, env, floods,
//! raw bytes, timeouts, SIGTERM-ignoring children, grandchildren holding the pipes.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use toolq::config::Config;
use toolq::{EnqueueRequest, Run, RunState};

use crate::support::TestEnv;

/// A config-defined command tool `name` running `sh -c script` (script args: $1.. = extra).
pub fn sh_tool(config: &mut Config, name: &str, script: &str, extra: &str) {
    let text = format!(
        "[tools.{name}]\ncommand = [\"sh\", \"-c\", {script:?}, \"sh\", {extra:?}]\n{}",
        ""
    );
    let parsed = Config::parse(&text, "test").unwrap();
    config.tools.extend(parsed.tools);
}

fn tool_with(config: &mut Config, toml_text: &str) {
    let parsed = Config::parse(toml_text, "test").unwrap();
    config.tools.extend(parsed.tools);
}

async fn run_once(env: &TestEnv, tool: &str, args: Value) -> Run {
    let mut req = EnqueueRequest::new(tool, args).session("s1");
    req.max_attempts = Some(1);
    let id = env.client.enqueue(req).await.unwrap().run_id;
    env.drain().await;
    env.client.get(&id).await.unwrap()
}

async fn log_of(env: &TestEnv, run: &Run) -> Vec<u8> {
    env.client.log(run).await.unwrap().unwrap().content
}

async fn result_of(env: &TestEnv, run: &Run) -> Value {
    let blob = env.client.result(run).await.unwrap().unwrap();
    serde_json::from_slice(&blob.content).unwrap()
}

/// Whether a pid is gone (or a zombie waiting to be reaped).
fn is_dead(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z')),
    }
}

async fn wait_dead(pid_file: &Path) {
    let pid = std::fs::read_to_string(pid_file).unwrap();
    crate::support::wait_for("the process to end", async || {
        (is_dead(&pid).then_some(()), format!("pid {pid} alive"))
    })
    .await;
}

#[tokio::test]
async fn command_tool_gets_args_and_env_and_reports_by_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("ids");
    let env = TestEnv::with_config(|c| {
        sh_tool(
            c,
            "record",
            "echo \"$TOOLQ_RUN_ID $TOOLQ_SESSION_ID $TOOLQ_ATTEMPT\" >> \"$1\"; \
             echo '::toolq::status reading'; echo '::toolq::progress {\"current\": 1, \"total\": 2}'; \
             read -r line; echo \"stdin=$line\"; echo '::toolq::result {\"args\": '\"$TOOLQ_ARGS\"'}'",
            ids.to_str().unwrap(),
        )
    });
    let run = run_once(&env, "record", json!({"n": 7})).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    let recorded = std::fs::read_to_string(&ids).unwrap();
    assert_eq!(recorded.trim(), format!("{} s1 1", run.id));
    assert_eq!(
        result_of(&env, &run).await["result"],
        json!({"args": {"n": 7}})
    );
    assert_eq!(run.status_text.as_deref(), Some("reading"));
    let log = String::from_utf8(log_of(&env, &run).await).unwrap();
    assert!(log.contains("[stdout] stdin={\"n\":7}\n"), "{log}");
    assert!(
        !log.contains("::toolq::"),
        "protocol lines stay out of the log: {log}"
    );
}

#[tokio::test]
async fn without_a_result_line_the_result_is_exit_code_and_stdout_tail() {
    let env = TestEnv::with_config(|c| sh_tool(c, "plain", "echo one; echo two", ""));
    let run = run_once(&env, "plain", json!({})).await;
    assert_eq!(
        result_of(&env, &run).await["result"],
        json!({"exit_code": 0, "stdout_tail": "one\ntwo\n"})
    );
}

#[tokio::test]
async fn non_zero_exit_is_a_tool_error_naming_the_code() {
    let env = TestEnv::with_config(|c| sh_tool(c, "bad", "echo oops >&2; exit 7", ""));
    let run = run_once(&env, "bad", json!({})).await;
    assert_eq!(run.state, RunState::Failed);
    let err = run.error.clone().unwrap();
    assert!(err.contains("exited with code 7"), "{err}");
    let log = String::from_utf8(log_of(&env, &run).await).unwrap();
    assert!(log.contains("[stderr] oops"), "{log}");
}

#[tokio::test]
async fn output_flood_is_capped_while_the_pipe_keeps_draining() {
    // 100 MB of output against a 64 KiB cap: the child must finish (never blocked on a full
    // pipe) and the log must stop at the cap with the truncation note.
    let env = TestEnv::with_config(|c| {
        tool_with(
            c,
            "[tools.flood]\ncommand = [\"sh\", \"-c\", \"yes | head -c 100000000; echo done >&2\"]\noutput_cap = 65536\n",
        )
    });
    let run = run_once(&env, "flood", json!({})).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    let blob = env.client.log(&run).await.unwrap().unwrap();
    assert!(blob.truncated);
    assert!(blob.content.len() < 65536 + 200, "{}", blob.content.len());
    let text = String::from_utf8(blob.content).unwrap();
    assert!(
        text.ends_with("(the log keeps at most 65536 bytes)\n"),
        "{}",
        &text[text.len() - 100..]
    );
    assert!(run.output_tail.unwrap().contains("[stderr] done"));
}

#[tokio::test]
async fn non_utf8_and_nul_bytes_survive_in_the_log_and_show_escaped() {
    let env = TestEnv::with_config(|c| sh_tool(c, "raw", "printf 'a\\000b\\377c\\n'", ""));
    let run = run_once(&env, "raw", json!({})).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    assert_eq!(log_of(&env, &run).await, b"[stdout] a\x00b\xffc\n");
    assert!(
        run.output_tail
            .as_deref()
            .unwrap()
            .contains("a\\x00b\\xffc"),
        "{:?}",
        run.output_tail
    );
}

#[tokio::test]
async fn a_hang_is_ended_by_its_timeout_and_the_process_dies() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let env = TestEnv::with_config(|c| {
        tool_with(
            c,
            &format!(
                "[tools.hangs]\ncommand = [\"sh\", \"-c\", \"echo $$ > \\\"$1\\\"; exec sleep 30\", \"sh\", {:?}]\ntimeout = \"300ms\"\n",
                pid.to_str().unwrap()
            ),
        )
    });
    let run = run_once(&env, "hangs", json!({})).await;
    assert_eq!(run.state, RunState::Failed);
    assert!(
        run.error
            .as_deref()
            .unwrap()
            .contains("timed out after 300ms")
    );
    wait_dead(&pid).await;
}

#[tokio::test]
async fn a_child_ignoring_sigterm_is_killed_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let env = TestEnv::with_config(|c| {
        c.worker.cancel_grace = Duration::from_secs(5);
        tool_with(
            c,
            &format!(
                "[tools.stubborn]\ncommand = [\"sh\", \"-c\", \"trap '' TERM; echo $$ > \\\"$1\\\"; while :; do sleep 0.05; done\", \"sh\", {:?}]\ntimeout = \"300ms\"\nkill_grace = \"200ms\"\n",
                pid.to_str().unwrap()
            ),
        )
    });
    let run = run_once(&env, "stubborn", json!({})).await;
    assert_eq!(run.state, RunState::Failed);
    assert!(run.error.as_deref().unwrap().contains("timed out"));
    wait_dead(&pid).await;
}

#[tokio::test]
async fn a_grandchild_holding_the_pipe_does_not_hang_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let env = TestEnv::with_config(|c| {
        sh_tool(
            c,
            "forks",
            "sleep 30 & echo $! > \"$1\"; echo started",
            pid.to_str().unwrap(),
        )
    });
    let run = run_once(&env, "forks", json!({})).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    let log = String::from_utf8(log_of(&env, &run).await).unwrap();
    assert!(log.contains("[stdout] started"), "{log}");
    wait_dead(&pid).await;
}

#[tokio::test]
async fn shell_is_absent_unless_enabled_and_honours_allowed_programs() {
    let off = TestEnv::new();
    let e = off
        .client
        .enqueue(EnqueueRequest::new(
            "shell",
            json!({"argv": ["echo", "hi"]}),
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("shell"), "{e}");

    let env = TestEnv::with_config(|c| {
        c.shell.enabled = true;
        c.shell.allowed_programs = vec!["echo".into(), "sh".into()];
    });
    let e = env
        .client
        .enqueue(EnqueueRequest::new(
            "shell",
            json!({"argv": ["rm", "-rf", "/"]}),
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("rm"), "{e}");
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
    let run = run_once(&env, "shell", json!({"argv": ["echo", "hi $HOME"]})).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    assert_eq!(
        result_of(&env, &run).await["result"]["stdout_tail"],
        "hi $HOME\n"
    );
    let run = run_once(
        &env,
        "shell",
        json!({"argv": ["sh", "-c", "sleep 30"], "timeout_ms": 100}),
    )
    .await;
    assert_eq!(run.state, RunState::Failed);
    assert!(run.error.unwrap().contains("timed out after 100 ms"));
}

#[tokio::test]
async fn a_result_line_longer_than_an_output_line_is_whole() {
    let env = TestEnv::with_config(|c| {
        sh_tool(
            c,
            "big",
            "printf '::toolq::result {\"s\": \"%s\"}\\n' \"$(head -c 300000 /dev/zero | tr '\\000' a)\"",
            "",
        )
    });
    let run = run_once(&env, "big", json!({})).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    let s = result_of(&env, &run).await["result"]["s"]
        .as_str()
        .unwrap()
        .len();
    assert_eq!(s, 300_000);
}

#[tokio::test]
async fn args_too_big_for_the_environment_arrive_on_stdin() {
    let env =
        TestEnv::with_config(|c| sh_tool(c, "bigargs", "echo \"env=${#TOOLQ_ARGS}\"; wc -c", ""));
    let big = "b".repeat(200_000);
    let run = run_once(&env, "bigargs", json!({"s": big})).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    let log = String::from_utf8(log_of(&env, &run).await).unwrap();
    assert!(log.contains("[stdout] env=0\n"), "{log}");
    assert!(log.contains("200008"), "{log}");
    assert!(log.contains("too big for TOOLQ_ARGS"), "{log}");
}

#[tokio::test]
async fn cancelling_a_running_command_ends_its_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let env = TestEnv::with_config(|c| {
        sh_tool(
            c,
            "waits",
            "sleep 30 & echo $! > \"$1\"; wait",
            pid.to_str().unwrap(),
        )
    });
    let id = env
        .client
        .enqueue(EnqueueRequest::new("waits", json!({})))
        .await
        .unwrap()
        .run_id;
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(env.client.worker(Default::default()).run(stop.clone()));
    crate::support::wait_for("the command to start", async || {
        (pid.exists().then_some(()), "no pid file yet".into())
    })
    .await;
    env.client.cancel(&id).await.unwrap();
    let run = crate::support::wait_for("the run to be cancelled", async || {
        let r = env.client.get(&id).await.unwrap();
        let s = format!("{}", r.state);
        ((r.state == RunState::Cancelled).then_some(r), s)
    })
    .await;
    assert!(run.error.unwrap().contains("cancelled"));
    wait_dead(&pid).await;
    stop.cancel();
    worker.await.unwrap().unwrap();
}
