//! Input edges of the `toolq` binary (issue 40): durations in fixed units only and written in
//! one style, exit codes and messages that name what was given and where, and empty filters.

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::Value;

use crate::support::{TestDb, toolq, toolq_command};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `toolq` in `dir` with `env` set (and nothing `TOOLQ_*` from the test's environment).
fn toolq_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    toolq_command()
        .current_dir(dir)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the toolq binary runs")
}

/// Asserts exit 2 with `needle` on stderr and nothing on stdout; returns stderr.
fn refused(o: &Output, what: &str, needle: &str) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{what}: {e}");
    assert!(
        e.contains(needle),
        "{what}: stderr should hold {needle:?}: {e}"
    );
    assert!(stdout(o).is_empty(), "{what}: nothing on stdout");
    e
}

#[test]
fn issue_40_months_and_years_are_refused_and_durations_read_in_one_style() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    assert!(toolq(&db, &["init"]).status.success());
    // `10M` is ten months to humantime: refused, naming the flag and pointing at minutes.
    for (args, needle) in [
        (vec!["--in", "10M"], "--in \"10M\": uses \"M\" (months)"),
        (vec!["--in", "1y"], "--in \"1y\": uses \"y\" (years)"),
        (vec!["--timeout", "2 months"], "--timeout \"2 months\""),
        (
            vec!["--unique-by", "args", "--unique-for", "1year"],
            "--unique-for \"1year\"",
        ),
    ] {
        let mut all = vec!["enqueue", "echo", "--args", r#"{"message":"m"}"#];
        all.extend(&args);
        let e = refused(&toolq(&db, &all), &format!("{args:?}"), needle);
        assert!(e.contains("write minutes as m (e.g. 10m)"), "{e}");
    }
    let o = toolq(&db, &["cancel", "--older-than", "3M", "--dry-run"]);
    refused(
        &o,
        "cancel --older-than 3M",
        "--older-than \"3M\": uses \"M\"",
    );
    assert_eq!(db.count("SELECT count(*) FROM runs"), 0);
    // A config key likewise, naming the key and where it was set.
    std::fs::write(dir.path().join("m.toml"), "[worker]\nlease = \"10M\"\n").unwrap();
    let o = toolq_in(dir.path(), &["--config", "m.toml", "config"], &[]);
    refused(
        &o,
        "lease = 10M",
        "m.toml, line 2: worker.lease = \"10M\"\n  uses \"M\" (months)",
    );
    // What is shown reads in days, hours and minutes: never months.
    let o = toolq(
        &db,
        &[
            "enqueue",
            "echo",
            "--args",
            r#"{"message":"m"}"#,
            "--in",
            "3000000s",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = toolq(&db, &["runs"]);
    let out = stdout(&o);
    assert!(out.contains("delayed 34d 17h"), "{out}");
    assert!(!out.contains("month"), "{out}");
}

#[test]
fn issue_40_enqueue_file_missing_is_bad_input_and_dash_reads_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    assert!(toolq(&db, &["init"]).status.success());
    let missing = dir.path().join("missing.jsonl");
    let missing = missing.display().to_string();
    let o = toolq(&db, &["enqueue", "--file", &missing]);
    refused(
        &o,
        "missing file",
        &format!("--file \"{missing}\": cannot be read"),
    );
    let o = toolq(&db, &["enqueue", "--file", dir.path().to_str().unwrap()]);
    refused(&o, "a directory", "--file");
    // `-` is standard input, and errors name it.
    let run = |input: &str| {
        let mut child = toolq_command()
            .arg("--db")
            .arg(&db.url)
            .args(["enqueue", "--file", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let o = run(
        "{\"tool\":\"echo\",\"args\":{\"message\":\"a\"}}\n{\"tool\":\"echo\",\"args\":{\"message\":\"b\"}}\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stdout(&o));
    assert_eq!(db.count("SELECT count(*) FROM runs"), 2);
    let o = run("{\"tool\":\"echo\",\"args\":{\"message\":\"a\"}}\n{\"tool\":\"nope\"}\n");
    refused(&o, "bad line on stdin", "stdin line 2: tool \"nope\"");
    assert_eq!(db.count("SELECT count(*) FROM runs"), 2);
}

#[test]
fn issue_40_config_clashes_name_the_file_line_and_the_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write(
        "dup.toml",
        "[worker]\nconcurrency = 2\n\n[tools.echo]\ncommand = [\"/bin/echo\"]\n",
    );
    let o = toolq_in(dir.path(), &["--config", "dup.toml", "tools"], &[]);
    refused(
        &o,
        "[tools.echo]",
        "config dup.toml, line 4: [tools.echo]: echo is built in",
    );
    // The [limits] key is quoted with its own line and value, the [tools] one with its own.
    write(
        "clash.toml",
        "[limits.x]\nmax_running = 3\n\n[tools.x]\ncommand = [\"/bin/echo\"]\nmax_running = 2\n",
    );
    let o = toolq_in(dir.path(), &["--config", "clash.toml", "tools"], &[]);
    refused(
        &o,
        "limits/tools clash",
        "config clash.toml, line 2: limits.x.max_running = 3\n  \
         tools.x.max_running = 2 is set too (clash.toml, line 6)",
    );
    // A lower-case override is named as it was written.
    let o = toolq_in(
        dir.path(),
        &["--json", "config"],
        &[("toolq_worker__concurrency", "7")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = v["values"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == "worker.concurrency")
        .unwrap();
    assert_eq!(e["value"], 7, "{e}");
    assert_eq!(e["var"], "toolq_worker__concurrency", "{e}");
}

#[test]
fn issue_40_messages_name_what_was_given_where_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    assert!(toolq(&db, &["init"]).status.success());
    // The empty tool name is quoted.
    refused(
        &toolq(&db, &["enqueue", ""]),
        "enqueue ''",
        "tool \"\": is not registered",
    );
    // The positional SESSION is not the --session flag.
    let e = refused(
        &toolq(&db, &["inbox", ""]),
        "inbox ''",
        "SESSION \"\": must not be empty",
    );
    assert!(!e.contains("--session"), "{e}");
    // An empty TOOLQ_DB is named as the variable.
    let o = toolq_command()
        .current_dir(dir.path())
        .env("TOOLQ_DB", "")
        .arg("runs")
        .output()
        .unwrap();
    let e = refused(&o, "TOOLQ_DB=", "TOOLQ_DB \"\": is set but empty");
    assert!(!e.contains("--db"), "{e}");
    // An empty --tool is refused before any note about it.
    let e = refused(
        &toolq(&db, &["pause", "--tool", ""]),
        "pause --tool ''",
        "--tool \"\": must not be empty",
    );
    assert!(!e.contains("note"), "{e}");
    // A timeout is echoed as typed.
    for t in ["0s", "0m"] {
        refused(
            &toolq(
                &db,
                &[
                    "enqueue",
                    "echo",
                    "--args",
                    r#"{"message":"m"}"#,
                    "--timeout",
                    t,
                ],
            ),
            t,
            &format!("--timeout \"{t}\": must be greater than zero"),
        );
    }
    assert_eq!(db.count("SELECT count(*) FROM runs"), 0);
}

#[test]
fn issue_40_empty_filters_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    let o = toolq(&db, &["enqueue", "echo", "--args", r#"{"message":"m"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["runs", "--session", ""], "--session \"\""),
        (vec!["runs", "--tool", ""], "--tool \"\""),
        (
            vec!["runs", "--tool", " "],
            "--tool \" \": must not be blank",
        ),
        (vec!["runs", "--state", ""], "--state \"\""),
        (
            vec!["cancel", "--session", "", "--dry-run"],
            "--session \"\"",
        ),
        (vec!["cancel", "--tool", ""], "--tool \"\""),
        (vec!["retry", "--session", ""], "--session \"\""),
        (vec!["retry", "--state", ""], "--state \"\""),
        (vec!["schedule", "list", "--session", ""], "--session \"\""),
        (vec!["pause", "--session", ""], "--session \"\""),
        (vec!["resume", "--tool", ""], "--tool \"\""),
        (vec!["inbox", ""], "SESSION \"\""),
        (vec!["wait", ""], "run id \"\""),
        (vec!["logs", ""], "run id \"\""),
    ];
    for (args, needle) in cases {
        refused(&toolq(&db, &args), &format!("{args:?}"), needle);
    }
    // Nothing was cancelled, paused or changed.
    assert_eq!(
        db.count("SELECT count(*) FROM runs WHERE state = 'queued'"),
        1
    );
    assert_eq!(db.count("SELECT count(*) FROM pauses"), 0);
}
