//! One config for the CLI and the worker, through the real `toolq` binary: the lookup order,
//! environment overrides, flags, `toolq config` provenance, and errors that name the file,
//! line, key and allowed values.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `toolq` in `dir` with `env` and nothing toolq reads from the test's own environment.
fn toolq_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolq"));
    cmd.current_dir(dir).args(args).env_remove("RUST_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLQ_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("the toolq binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `toolq config --json` in `dir`: the effective configuration.
fn effective(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "config"]);
    let o = toolq_in(dir, &all, env);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The entry of `key` in `toolq config --json` output.
fn entry<'a>(v: &'a Value, key: &str) -> &'a Value {
    v["values"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == key)
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// Runs `toolq stats` on a config file holding `text`; returns stderr, asserting exit 2 and
/// that no database was created.
fn refused(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.toml"), text).unwrap();
    let o = toolq_in(dir.path(), &["--config", "bad.toml", "stats"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!dir.path().join("toolq.db").exists());
    let e = stderr(&o);
    assert!(e.starts_with("toolq: config bad.toml"), "{e}");
    e
}

#[test]
fn durations_past_a_century_are_refused_not_overflowed() {
    // Each of these once overflowed an instant or a multiplication in the worker.
    for (text, key) in [
        (
            "[worker]\nheartbeat_interval = \"500000000000d\"\n",
            "worker.heartbeat_interval",
        ),
        ("[worker]\nlease = \"73000d\"\n", "worker.lease"),
        ("[runs]\nbackoff_max = \"1000000d\"\n", "runs.backoff_max"),
        (
            "[limits.echo]\nrate = \"5/100000000d\"\n",
            "limits.echo.rate",
        ),
    ] {
        let e = refused(text);
        assert!(e.contains(key), "{text}: {e}");
        assert!(
            e.contains("longer than 36525 days (100 years)"),
            "{text}: {e}"
        );
    }
}

#[test]
fn a_blank_token_and_a_backoff_base_above_its_max_are_refused() {
    let e = refused("[web]\ntoken = \" \"\n");
    assert!(
        e.contains("web.token") && e.contains("must not be empty or blank"),
        "{e}"
    );
    let e = refused("[runs]\nbackoff_base = \"10m\"\nbackoff_max = \"1s\"\n");
    assert!(
        e.contains("runs.backoff_base") && e.contains("runs.backoff_max"),
        "{e}"
    );
}

#[test]
fn a_misspelt_key_names_file_line_section_and_the_likely_key() {
    let e = refused("# tuned\n[worker]\nconcurency = 3\n");
    assert!(
        e.contains(
            "bad.toml, line 3: unknown key `concurency` in [worker]; did you mean `concurrency`?"
        ),
        "{e}"
    );
    assert!(
        e.contains("\n  allowed keys in [worker]: concurrency, per_session"),
        "{e}"
    );
    let e = refused("[workr]\nconcurrency = 3\n");
    assert!(
        e.contains("line 1: unknown section `workr`; did you mean `worker`?"),
        "{e}"
    );
}

#[test]
fn a_wrong_type_says_what_was_found_and_expected_on_its_own_lines() {
    let e = refused("[worker]\nconcurrency = \"many\"\n");
    assert!(
        e.contains("bad.toml, line 2: worker.concurrency has the wrong type\n"),
        "{e}"
    );
    assert!(e.contains("  found:    the string \"many\"\n"), "{e}");
    assert!(e.contains("  expected: an integer"), "{e}");
    // A bare number where a duration goes says how to write one.
    let e = refused("[worker]\nlease = 30\n");
    assert!(
        e.contains("line 2: worker.lease has the wrong type\n  found:    the integer 30\n  expected: a duration: a quoted string with a unit, like \"30s\""),
        "{e}"
    );
    // A value out of range names the allowed range, on the key's line.
    let e = refused("[runs]\n\nmax_attempts = 0\n");
    assert!(
        e.contains("bad.toml, line 3: runs.max_attempts = 0\n  must be between 1 and 1000"),
        "{e}"
    );
}

#[test]
fn an_unknown_tool_key_and_a_missing_command_name_the_tool() {
    let e = refused("[tools.x]\ncomand = [\"df\"]\n");
    assert!(
        e.contains("bad.toml, line 2: unknown key `comand` in [tools.x]; did you mean `command`?"),
        "{e}"
    );
    assert!(
        e.contains("allowed keys in [tools.x]: command, description"),
        "{e}"
    );
    let e = refused("[tools.x]\ndescription = \"no command\"\n");
    assert!(
        e.contains("line 1: [tools.x] is missing the required key `command`"),
        "{e}"
    );
}

#[test]
fn an_approval_requirement_for_a_misspelt_tool_suggests_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolq.toml"),
        "[approvals]\nrequire = [\"ecoh\"]\n",
    )
    .unwrap();
    let o = toolq_in(dir.path(), &["stats"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("approvals.require \"ecoh\": names a tool that is not registered; did you mean `echo`?\n  registered tools: add, "),
        "{e}"
    );
}

#[test]
fn a_tool_defined_twice_names_both_the_tool_and_the_line() {
    let e = refused("[tools.x]\ncommand = [\"df\"]\n\n[tools.x]\ncommand = [\"du\"]\n");
    assert!(
        e.contains("bad.toml, line 4: tool `x` is defined twice\n"),
        "{e}"
    );
    assert!(e.contains("\n  4 | [tools.x]"), "{e}");
}

#[test]
fn environment_variables_override_any_key_and_their_typos_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolq.toml"), "[worker]\nconcurrency = 2\n").unwrap();
    let v = effective(
        dir.path(),
        &[],
        &[
            ("TOOLQ_WORKER__CONCURRENCY", "8"),
            ("TOOLQ_RETENTION__ENABLED", "false"),
        ],
    );
    let c = entry(&v, "worker.concurrency");
    assert_eq!(c["value"], 8);
    assert_eq!(c["source"], "env");
    assert_eq!(c["var"], "TOOLQ_WORKER__CONCURRENCY");
    assert_eq!(entry(&v, "retention.enabled")["value"], false);
    let o = toolq_in(dir.path(), &["stats"], &[("TOOLQ_WORKER__CONCURENCY", "8")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "environment variable TOOLQ_WORKER__CONCURENCY: unknown key `concurency` in [worker]; did you mean `concurrency`?"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn lookup_order_is_flag_then_toolq_config_then_working_dir_then_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let conc = |v: &Value| entry(v, "worker.concurrency")["value"].clone();
    // Nothing: the built-in defaults.
    let v = effective(d, &[], &[]);
    assert_eq!(v["file"], Value::Null);
    assert_eq!(conc(&v), 64);
    assert_eq!(entry(&v, "worker.concurrency")["source"], "default");
    // ./toolq.toml when present.
    std::fs::write(d.join("toolq.toml"), "[worker]\nconcurrency = 2\n").unwrap();
    let v = effective(d, &[], &[]);
    assert_eq!(
        (v["file"].as_str(), conc(&v)),
        (Some("./toolq.toml"), 2.into())
    );
    // TOOLQ_CONFIG over ./toolq.toml.
    std::fs::write(d.join("env.toml"), "[worker]\nconcurrency = 3\n").unwrap();
    let v = effective(d, &[], &[("TOOLQ_CONFIG", "env.toml")]);
    assert_eq!((v["file"].as_str(), conc(&v)), (Some("env.toml"), 3.into()));
    assert_eq!(v["file_choice"], "from TOOLQ_CONFIG");
    // --config over both.
    std::fs::write(d.join("flag.toml"), "[worker]\nconcurrency = 4\n").unwrap();
    let v = effective(
        d,
        &["--config", "flag.toml"],
        &[("TOOLQ_CONFIG", "env.toml")],
    );
    assert_eq!(
        (v["file"].as_str(), conc(&v)),
        (Some("flag.toml"), 4.into())
    );
    // A named file that is missing is an error, not a silent fallback.
    let o = toolq_in(d, &["--config", "nope.toml", "stats"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("config nope.toml (from --config): "),
        "{}",
        stderr(&o)
    );
    let o = toolq_in(d, &["stats"], &[("TOOLQ_CONFIG", "gone.toml")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("config gone.toml (from TOOLQ_CONFIG): "),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_cli_knows_a_config_tool_without_being_told_the_config_again() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolq.toml"),
        "[tools.hello]\ncommand = [\"echo\", \"hello\"]\n",
    )
    .unwrap();
    let o = toolq_in(dir.path(), &["enqueue", "hello"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = toolq_in(dir.path(), &["tools", "hello"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn toolq_config_names_where_each_value_came_from() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolq.toml"),
        "[worker]\nconcurrency = 2\nlease = \"40s\"\n",
    )
    .unwrap();
    let o = toolq_in(
        dir.path(),
        &["--db", "other.db", "config"],
        &[("TOOLQ_WORKER__POLL_INTERVAL", "1s")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let line = |key: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("{key} missing:\n{out}"))
            .to_string()
    };
    assert!(
        out.starts_with("# config file: ./toolq.toml (found in the working directory)\n"),
        "{out}"
    );
    assert!(
        line("worker.concurrency").ends_with("# ./toolq.toml, line 2"),
        "{out}"
    );
    assert!(
        line("worker.lease").ends_with("# ./toolq.toml, line 3"),
        "{out}"
    );
    assert!(
        line("worker.poll_interval")
            .ends_with("# environment variable TOOLQ_WORKER__POLL_INTERVAL"),
        "{out}"
    );
    assert!(line("database.path").contains("\"other.db\""), "{out}");
    assert!(line("database.path").ends_with("# --db"), "{out}");
    assert!(
        line("runs.timeout").ends_with("# built-in default"),
        "{out}"
    );
    assert!(
        !dir.path().join("other.db").exists(),
        "config opens no database"
    );
}

#[test]
fn worker_flags_win_over_env_and_file_and_the_worker_logs_its_config_and_each_end() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("toolq.toml"), "[worker]\nconcurrency = 2\n").unwrap();
    let id = toolq_in(
        d,
        &[
            "enqueue",
            "echo",
            "--args",
            r#"{"message":"hi"}"#,
            "--session",
            "demo",
        ],
        &[],
    );
    assert!(id.status.success(), "{}", stderr(&id));
    let id = String::from_utf8(id.stdout).unwrap().trim().to_string();
    let o = toolq_in(
        d,
        &["worker", "--drain", "--concurrency", "3"],
        &[("TOOLQ_WORKER__CONCURRENCY", "5")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let log = stderr(&o);
    let start = log
        .lines()
        .find(|l| l.contains("worker starting"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(start.contains("concurrency=3"), "{start}");
    assert!(
        start.contains("config=./toolq.toml (found in the working directory)"),
        "{start}"
    );
    assert!(
        start.contains("tools=") && start.contains("echo"),
        "{start}"
    );
    let end = log
        .lines()
        .find(|l| l.contains("run ended"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(end.contains(" INFO "), "{end}");
    for field in [
        format!("run_id={id}"),
        "tool=echo".into(),
        "session=demo".into(),
        "outcome=completed".into(),
        "attempt=1".into(),
        "duration=".into(),
    ] {
        assert!(end.contains(&field), "{field} missing: {end}");
    }
    // A bad flag value is named as the flag.
    let o = toolq_in(d, &["worker", "--drain", "--poll-interval", "soon"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("config --poll-interval: worker.poll_interval = \"soon\""),
        "{}",
        stderr(&o)
    );
    // Without a config file the start line says so.
    std::fs::remove_file(d.join("toolq.toml")).unwrap();
    let o = toolq_in(d, &["worker", "--drain"], &[]);
    assert!(
        stderr(&o).contains("config=built-in defaults"),
        "{}",
        stderr(&o)
    );
}
