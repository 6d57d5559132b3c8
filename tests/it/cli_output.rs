//! Output scripts can trust, through the real `toolq` binary: `id` in every JSON answer,
//! ids on stdout for `enqueue --file` and `schedule add`, flags (not columns) in errors,
//! `wait`, inbox paging, the run_at and duration columns, help layout, completions and man.

use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use serde_json::{Value, json};
use toolq::{Client, ManualClock, Registry};

use crate::support::{t, toolq};

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(db: &crate::support::TestDb, args: &[&str]) -> String {
    let o = toolq(db, args);
    assert!(o.status.success(), "{args:?}: {}", err(&o));
    out(&o)
}

fn ok_json(db: &crate::support::TestDb, args: &[&str]) -> Value {
    serde_json::from_str(&ok(db, args)).unwrap()
}

fn enqueue(db: &crate::support::TestDb, tool: &str, args: &str) -> String {
    ok(db, &["enqueue", tool, "--args", args])
        .trim()
        .to_string()
}

fn drain(db: &crate::support::TestDb) {
    ok(db, &["worker", "--drain"]);
}

#[test]
fn json_answers_name_the_run_id_field_id_and_keep_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let v = ok_json(
        &db,
        &["--json", "enqueue", "echo", "--args", r#"{"message":"a"}"#],
    );
    assert!(v["id"].as_str().unwrap().starts_with("bg_"), "{v}");
    assert_eq!(v["id"], v["run_id"]);
    let id = v["id"].as_str().unwrap().to_string();
    let c = ok_json(&db, &["--json", "cancel", &id]);
    assert_eq!((&c["id"], &c["run_id"]), (&json!(id), &json!(id)));
    let r = ok_json(&db, &["--json", "retry", &id]);
    assert_eq!(r["id"], json!(id));
    drain(&db);
    let l = ok_json(&db, &["--json", "logs", &id]);
    assert_eq!(l["id"], json!(id));
    for args in [vec!["--json", "show", &id], vec!["--json", "wait", &id]] {
        let v = ok_json(&db, &args);
        let v = if v.is_array() { v[0].clone() } else { v };
        assert_eq!(v["id"], json!(id), "{args:?}");
    }
    let runs = ok_json(&db, &["--json", "runs"]);
    assert_eq!(runs[0]["id"], json!(id));
}

#[test]
fn enqueue_file_prints_the_ids_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let f = dir.path().join("runs.jsonl");
    std::fs::write(
        &f,
        "{\"tool\":\"echo\",\"args\":{\"message\":\"1\"}}\n{\"tool\":\"add\",\"args\":{\"a\":1,\"b\":2}}\n",
    )
    .unwrap();
    let f = f.display().to_string();
    let o = toolq(&db, &["enqueue", "--file", &f]);
    assert!(o.status.success(), "{}", err(&o));
    let ids: Vec<String> = out(&o).lines().map(str::to_string).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(err(&o).is_empty(), "{}", err(&o));
    let tools: Vec<String> = ids
        .iter()
        .map(|id| {
            ok_json(&db, &["--json", "show", id])["tool"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(tools, ["echo", "add"]);
    let v = ok_json(&db, &["--json", "enqueue", "--file", &f]);
    assert_eq!(v["ids"].as_array().unwrap().len(), 2);
    assert_eq!(v["created"], 2);
    assert_eq!(v["ids"][1], v["runs"][1]["id"]);
    assert_eq!(v["enqueued"], 2);
}

#[test]
fn schedule_add_prints_only_the_id_and_its_runs_carry_the_run_flags() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let o = toolq(
        &db,
        &[
            "schedule",
            "add",
            "echo",
            "--args",
            r#"{"message":"s"}"#,
            "--at",
            "2099-01-01T00:00:00Z",
            "--priority",
            "7",
            "--max-attempts",
            "5",
            "--timeout",
            "2m",
            "--delivery",
            "silent",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let id = out(&o);
    assert!(id.starts_with("sch_") && id.trim_end() == id.trim() && id.lines().count() == 1);
    assert!(
        err(&o).contains("next fire: 2099-01-01T00:00:00Z"),
        "{}",
        err(&o)
    );
    let shown = ok(&db, &["schedule", "show", id.trim()]);
    assert!(shown.contains("timeout") && shown.contains("2m"), "{shown}");

    // Fire it with a client whose clock stands at the one-shot instant.
    let config = db.config();
    let clock = ManualClock::new(t("2099-01-01T00:00:00Z"));
    let client = Client::open_with_clock(config, Registry::builtins(), Arc::new(clock)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fired = rt.block_on(client.fire_due_schedules()).unwrap();
    assert_eq!(fired.runs.len(), 1);
    let runs = ok_json(&db, &["--json", "runs"]);
    let run = &runs[0];
    assert_eq!(run["priority"], 7);
    assert_eq!(run["max_attempts"], 5);
    assert_eq!(run["timeout_ms"], 120_000);
    assert_eq!(run["delivery"], "silent");
}

#[test]
fn wait_blocks_until_the_runs_end_and_exits_by_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let good = enqueue(&db, "echo", r#"{"message":"x"}"#);
    let bad = enqueue(&db, "divide", r#"{"a":1,"b":0}"#);
    // The waiter starts before any worker exists, so it can only succeed by blocking.
    let waiter = Command::new(env!("CARGO_BIN_EXE_toolq"))
        .arg("--db")
        .arg(&db)
        .args(["wait", &good])
        .env_remove("TOOLQ_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drain(&db);
    let o = waiter.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        out(&o).contains(&good) && out(&o).contains("completed"),
        "{}",
        out(&o)
    );

    let o = toolq(&db, &["wait", &good, &bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains(&format!("{bad} failed")), "{}", err(&o));
    assert!(out(&o).contains("cannot divide by zero"), "{}", out(&o));

    let later = ok(&db, &["enqueue", "get_current_time", "--in", "1h"])
        .trim()
        .to_string();
    let o = toolq(
        &db,
        &["--json", "wait", &good, &later, "--timeout", "200ms"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("timed out after 200ms; still going:")
            && err(&o).contains(&format!("{later} (queued)")),
        "{}",
        err(&o)
    );
    let v: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v[0]["ended"], true);
    assert_eq!(v[1]["ended"], false);
    assert_eq!(v[1]["state"], "queued");

    let o = toolq(&db, &["wait", "bg_nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let o = toolq(&db, &["wait", "bg_01a20c79f4697389941c7827fdf92e92"]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("not found"), "{}", err(&o));
    let o = toolq(&db, &["wait", &good, "--timeout", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--timeout \"soon\""), "{}", err(&o));
}

fn inbox_ids(db: &crate::support::TestDb, extra: &[&str]) -> Vec<i64> {
    let mut args = vec!["--json", "inbox", "demo"];
    args.extend_from_slice(extra);
    ok_json(db, &args)
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect()
}

#[test]
fn inbox_pages_newest_first_by_message_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    for i in 0..5 {
        ok(
            &db,
            &[
                "enqueue",
                "echo",
                "--session",
                "demo",
                "--args",
                &format!(r#"{{"message":"{i}"}}"#),
            ],
        );
    }
    drain(&db);
    let all = inbox_ids(&db, &[]);
    assert_eq!(all.len(), 5);
    assert!(all.windows(2).all(|w| w[0] > w[1]), "newest first: {all:?}");
    let newest = inbox_ids(&db, &["--limit", "2"]);
    assert_eq!(newest, all[..2]);
    let older = inbox_ids(&db, &["--limit", "2", "--before", &newest[1].to_string()]);
    assert_eq!(older, all[2..4]);
    let newer = inbox_ids(&db, &["--limit", "2", "--after", &all[4].to_string()]);
    assert_eq!(
        newer,
        all[2..4],
        "the two right after the oldest, newest first"
    );
    let between = inbox_ids(
        &db,
        &[
            "--after",
            &all[4].to_string(),
            "--before",
            &all[0].to_string(),
        ],
    );
    assert_eq!(between, all[1..4]);
    let o = toolq(&db, &["inbox", "demo", "--limit", "2"]);
    assert!(
        err(&o).contains(&format!("--before {}", newest[1])),
        "{}",
        err(&o)
    );
    let o = toolq(&db, &["inbox", "demo", "--limit", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--limit"), "{}", err(&o));
}

#[test]
fn runs_shows_run_at_and_duration_and_show_reads_like_people_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let done = enqueue(&db, "divide", r#"{"a":1,"b":0}"#);
    drain(&db);
    let ready = enqueue(&db, "echo", r#"{"message":"r"}"#);
    let later = ok(
        &db,
        &[
            "enqueue",
            "get_current_time",
            "--in",
            "2h",
            "--timeout",
            "2m",
        ],
    )
    .trim()
    .to_string();
    let table = ok(&db, &["runs"]);
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("RUN_AT") && header.contains("DURATION"),
        "{header}"
    );
    let line = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap()
            .to_string()
    };
    assert!(line(&ready).contains(" ready "), "{table}");
    assert!(
        line(&later).contains("delayed 1h 59m") || line(&later).contains("delayed 2h"),
        "{table}"
    );
    assert!(
        line(&done).contains("ms ") || line(&done).contains("s "),
        "{table}"
    );

    let shown = ok(&db, &["show", &later]);
    let timeout = shown.lines().find(|l| l.starts_with("timeout")).unwrap();
    assert_eq!(timeout.split_whitespace().nth(1), Some("2m"), "{shown}");
    let shown = ok(&db, &["show", &done]);
    let lines: Vec<&str> = shown.lines().collect();
    // The first attempt on the key's own line.
    let errors = lines.iter().find(|l| l.starts_with("errors")).unwrap();
    assert!(
        errors.contains("  attempt 1 at ") && errors.ends_with(": cannot divide by zero"),
        "{shown}"
    );
    assert!(lines.iter().any(|l| l.starts_with("duration")), "{shown}");
}

#[test]
fn every_subcommand_help_lists_its_own_options_first_and_an_example() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    // Every command `toolq --help` lists, so a new command needs its example too.
    let top = ok(&db, &["--help"]);
    let subs: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .collect();
    assert!(subs.len() > 15 && subs.contains(&"wait"), "{top}");
    for sub in subs {
        let help = ok(&db, &[sub, "--help"]);
        let own = help.find("Options:").unwrap_or(usize::MAX);
        let global = help
            .find("Global options:")
            .unwrap_or_else(|| panic!("{sub}: {help}"));
        assert!(own < global, "{sub}: own options come first: {help}");
        assert!(help.contains("Examples:\n  toolq "), "{sub}: {help}");
    }
    for sub in [
        "add", "list", "show", "cancel", "disable", "enable", "preview",
    ] {
        let help = ok(&db, &["schedule", sub, "--help"]);
        assert!(
            help.contains("Examples:\n  toolq schedule "),
            "{sub}: {help}"
        );
        assert!(
            help.find("Options:") < help.find("Global options:"),
            "{sub}: {help}"
        );
    }
    let help = ok(&db, &["schedule", "add", "--help"]);
    assert!(help.contains("--max-attempts"), "{help}");
    assert!(!db.has_schema(), "help opens no database");
}

#[test]
fn completions_and_man_page_cover_the_subcommands() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    for shell in ["bash", "zsh", "fish"] {
        let text = ok(&db, &["completions", shell]);
        for sub in ["enqueue", "wait", "schedule", "inbox"] {
            assert!(text.contains(sub), "{shell} completion lacks {sub}");
        }
        if shell == "bash" {
            let f = dir.path().join("toolq.bash");
            std::fs::write(&f, &text).unwrap();
            let o = Command::new("bash").arg("-n").arg(&f).output().unwrap();
            assert!(o.status.success(), "bash -n: {}", err(&o));
        }
    }
    let man = ok(&db, &["man"]);
    assert!(
        man.starts_with(".ie") || man.contains(".TH toolq 1"),
        "{man}"
    );
    for sub in ["enqueue", "wait", "schedule", "completions"] {
        assert!(man.contains(sub), "man page lacks {sub}");
    }
    let o = toolq(&db, &["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!db.has_schema(), "completions and man open no database");
}

/// Issue 40 item 11: `show` for command tools names the timeout that applied and where it
/// came from, prints an internal detail only when it says more, and puts a failure (exit
/// code 3) on the `errors` line.
#[test]
fn show_names_the_effective_timeout_and_each_failure_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let config = dir.path().join("toolq.toml");
    std::fs::write(
        &config,
        "[tools.slow]\ncommand = [\"sleep\", \"30\"]\ntimeout = \"1s\"\nkill_grace = \"1s\"\n\n\
         [tools.three]\ncommand = [\"sh\", \"-c\", \"echo oops >&2; exit 3\"]\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let run = |args: &[&str]| ok(&db, &[&["--config", config.as_str()], args].concat());
    let id_of = |tool: &str, extra: &[&str]| {
        run(&[
            &["enqueue", tool, "--args", "{}", "--max-attempts", "1"],
            extra,
        ]
        .concat())
        .trim()
        .to_string()
    };
    let slow = id_of("slow", &[]);
    let three = id_of("three", &[]);
    let own = id_of("three", &["--timeout", "3s"]);
    run(&["worker", "--drain"]);
    let line = |text: &str, key: &str| -> String {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} line in {text}"))
            .to_string()
    };

    let text = run(&["show", &slow]);
    let timeout = line(&text, "timeout");
    assert!(timeout.contains("(tools.slow.timeout)"), "{timeout}");
    let errors = line(&text, "errors");
    assert_eq!(errors.matches("timed out after").count(), 1, "{errors}");
    assert!(!errors.contains("internal:"), "{errors}");
    let v = ok_json(&db, &["--config", &config, "--json", "show", &slow]);
    assert_eq!(v["timeout_effective_ms"], 1000, "{v}");
    assert_eq!(v["timeout_source"], "tool");
    assert_eq!(
        v["timeout_ms"],
        Value::Null,
        "the run's own override stays as it was"
    );

    let text = run(&["show", &three]);
    assert!(line(&text, "timeout").contains("(runs.timeout)"), "{text}");
    let errors = line(&text, "errors");
    assert!(
        errors.contains("attempt 1 at ") && errors.contains("exited with code 3"),
        "{errors}"
    );
    let v = ok_json(&db, &["--config", &config, "--json", "show", &three]);
    assert_eq!(v["errors"][0]["error"], v["error"], "{v}");

    let v = ok_json(&db, &["--config", &config, "--json", "show", &own]);
    assert_eq!(
        (&v["timeout_effective_ms"], &v["timeout_source"]),
        (&json!(3000), &json!("run"))
    );
}

/// Issue 40 item 12: the log cap's note names the unit it counts (bytes, as
/// `runs.log_cap_bytes` is set) and the cut falls at a line end when one is near.
#[test]
fn the_log_cap_counts_bytes_and_cuts_at_a_line_end() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let config = dir.path().join("toolq.toml");
    std::fs::write(
        &config,
        "[runs]\nlog_cap_bytes = 1024\n\n[tools.chatty]\ncommand = [\"sh\", \"-c\", \
         \"i=0; while [ $i -lt 100 ]; do i=$((i+1)); echo \\\"line number $i here\\\"; done\"]\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let run = |args: &[&str]| ok(&db, &[&["--config", config.as_str()], args].concat());
    let id = run(&["enqueue", "chatty", "--args", "{}"])
        .trim()
        .to_string();
    run(&["worker", "--drain"]);
    let log = run(&["logs", &id]);
    let (kept, note) = log
        .rsplit_once("[system] ")
        .unwrap_or_else(|| panic!("no note: {log}"));
    assert_eq!(
        note.trim_end(),
        format!(
            "background output truncated at {} bytes (the log keeps at most 1024 bytes)",
            kept.len()
        ),
        "{log}"
    );
    assert!(kept.len() <= 1024 && kept.len() > 900, "{log}");
    for (n, line) in kept.lines().enumerate() {
        assert_eq!(
            line,
            format!("[stdout] line number {} here", n + 1),
            "{log}"
        );
    }
}
