//! Issue 36 on the command line, through the real binary: `enqueue --after/--after-any/
//! --batch-id`, `enqueue --file F --batch` with line refs and a callback, `toolq batch
//! list|show|wait|cancel|retry`, `runs --batch/--parent`, and what `show` says about a run's
//! links. Every bad input exits 2 (1 for an unknown batch) naming what was wrong, and writes
//! nothing.

use std::process::{Output, Stdio};

use serde_json::Value;

use crate::web::Site;

fn out(o: &Output) -> (Option<i32>, String, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs a command that must succeed; its stdout.
fn ok(site: &Site, args: &[&str]) -> String {
    let (code, stdout, err) = out(&site.toolq(args));
    assert_eq!(code, Some(0), "{args:?}: {err}");
    stdout
}

/// Runs a `--json` command that must succeed; its JSON.
fn json(site: &Site, args: &[&str]) -> Value {
    let stdout = ok(site, &[&["--json"], args].concat());
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
}

fn echo(site: &Site, msg: &str, extra: &[&str]) -> String {
    let args = format!(r#"{{"message":"{msg}"}}"#);
    site.enqueue(&[&["echo", "--args", &args], extra].concat())
}

/// Rows of the tables composition writes: runs, batches, edges, messages.
fn written(site: &Site) -> [i64; 4] {
    let db = site.db();
    [
        db.count("SELECT count(*) FROM runs"),
        db.count("SELECT count(*) FROM batches"),
        db.count("SELECT count(*) FROM run_deps"),
        db.count("SELECT count(*) FROM inbox"),
    ]
}

fn drain(site: &Site) {
    ok(site, &["worker", "--drain"]);
}

fn batch_messages(site: &Site, batch: &str) -> i64 {
    site.db().count(&format!(
        "SELECT count(*) FROM inbox WHERE kind = 'batch_completed' AND data LIKE '%{batch}%'"
    ))
}

/// Writes `lines` as a JSONL file in the site's directory; its path.
fn file(site: &Site, name: &str, lines: &[String]) -> String {
    let path = site.dir.path().join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.display().to_string()
}

const UNKNOWN_RUN: &str = "bg_01a20c6dd2ed72d48a2475a7a796b89c";
const UNKNOWN_BATCH: &str = "bt_01a20c6dd2ed72d48a2475a7a796b89c";

#[test]
fn a_chain_by_after_waits_blocked_then_a_drain_runs_it_in_order() {
    let site = Site::new();
    let a = echo(&site, "a", &[]);
    let b = echo(&site, "b", &["--after", &a]);
    // Comma-separated and repeated forms both add parents.
    let c = echo(&site, "c", &["--after", &format!("{a},{b}")]);
    let d = echo(&site, "d", &["--after", &a, "--after", &c]);

    let shown = ok(&site, &["show", &b]);
    assert!(shown.contains("blocked by 1 parent"), "{shown}");
    assert!(
        shown.contains(&a) && shown.contains("after  waiting"),
        "lists its parent with its mode and state: {shown}"
    );
    assert!(
        ok(&site, &["show", &c]).contains("blocked by 2 parents"),
        "counts its parents"
    );
    let table = ok(&site, &["runs"]);
    assert!(table.contains("blocked (1 parent)"), "{table}");
    assert!(table.contains("blocked (2 parents)"), "{table}");
    let links = &json(&site, &["show", &d])["links"];
    let parents: Vec<&str> = links["parents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["parent"].as_str().unwrap())
        .collect();
    assert_eq!(parents.len(), 2, "{links}");
    assert!(parents.contains(&a.as_str()) && parents.contains(&c.as_str()));
    assert_eq!(links["parents"][0]["mode"], "all");
    assert!(links["dependents"].as_array().unwrap().is_empty());
    assert!(links["children"].as_array().unwrap().is_empty());

    drain(&site);
    for id in [&a, &b, &c, &d] {
        assert_eq!(site.state(id), "completed", "{id}");
    }
    // Each ran after its parents: start times in chain order.
    let started = |id: &str| {
        site.db()
            .text(&format!("SELECT started_at FROM runs WHERE id = '{id}'"))
            .unwrap()
    };
    assert!(started(&a) <= started(&b) && started(&b) <= started(&c));
    assert!(started(&c) <= started(&d));
    let shown = ok(&site, &["show", &a]);
    assert!(shown.contains("dependents"), "{shown}");
    assert!(shown.contains(&b) && shown.contains(&d), "{shown}");
    let shown = ok(&site, &["show", &b]);
    assert!(shown.contains("after  completed"), "resolved: {shown}");
}

#[test]
fn a_failed_parent_cancels_its_dependent_and_after_any_runs_anyway() {
    let site = Site::new();
    let parent = site.enqueue(&[
        "divide",
        "--args",
        r#"{"a":1,"b":0}"#,
        "--max-attempts",
        "1",
    ]);
    let strict = echo(&site, "strict", &["--after", &parent]);
    let any = echo(&site, "any", &["--after", &parent, "--after-any"]);
    assert_eq!(
        json(&site, &["show", &any])["links"]["parents"][0]["mode"],
        "any"
    );
    drain(&site);
    assert_eq!(site.state(&parent), "failed");
    assert_eq!(site.state(&strict), "cancelled");
    let v = json(&site, &["show", &strict]);
    assert!(
        v["error"].as_str().unwrap().contains(&parent),
        "names the parent: {v}"
    );
    assert_eq!(site.state(&any), "completed");
    let shown = ok(&site, &["show", &any]);
    assert!(shown.contains("after_any  failed"), "{shown}");

    // A parent that has already failed: the new dependent is cancelled at once.
    let late = echo(&site, "late", &["--after", &parent]);
    assert_eq!(site.state(&late), "cancelled");
}

#[test]
fn bad_composition_input_exits_2_naming_what_was_wrong_and_writes_nothing() {
    let site = Site::with_config("\n[runs]\nmax_batch_runs = 3\n");
    let a = echo(&site, "a", &[]);
    let line = |msg: &str, extra: &str| {
        format!(r#"{{"tool":"echo","args":{{"message":"{msg}"}}{extra}}}"#)
    };
    let good = file(&site, "good.jsonl", &[line("x", ""), line("y", "")]);
    let big = file(
        &site,
        "big.jsonl",
        &(0..4).map(|i| line(&i.to_string(), "")).collect::<Vec<_>>(),
    );
    let unknown_ref = file(
        &site,
        "unknown_ref.jsonl",
        &[
            line("x", r#","ref":"x""#),
            line("y", r#","after":["nope"]"#),
        ],
    );
    let cycle = file(
        &site,
        "cycle.jsonl",
        &[
            line("x", r#","ref":"x","after":["z"]"#),
            line("y", r#","ref":"y","after":["x"]"#),
            line("z", r#","ref":"z","after":["y"]"#),
        ],
    );
    let twice = file(
        &site,
        "twice.jsonl",
        &[line("x", r#","ref":"x""#), line("y", r#","ref":"x""#)],
    );
    let self_ref = file(
        &site,
        "self.jsonl",
        &[line("x", r#","ref":"x","after":["x"]"#)],
    );
    let bad_id = file(
        &site,
        "bad_id.jsonl",
        &[line("x", r#","after":["bg_nope"]"#)],
    );
    let unknown_parent = file(
        &site,
        "unknown_parent.jsonl",
        &[line("x", &format!(r#","after":["{UNKNOWN_RUN}"]"#))],
    );
    let at_and_after = file(
        &site,
        "at_after.jsonl",
        &[line("x", &format!(r#","after":["{a}"],"in":"5m""#))],
    );
    let any_alone = file(
        &site,
        "any_alone.jsonl",
        &[line("x", r#","after_any":true"#)],
    );
    let e = r#"{"message":"e"}"#;
    let a_and_bad = format!("{a},x");
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["enqueue", "echo", "--args", e, "--after", "nope"],
            vec!["--after \"nope\"", "not a run id"],
        ),
        (
            vec!["enqueue", "echo", "--args", e, "--after", &a_and_bad],
            vec!["--after \"x\""],
        ),
        (
            vec!["enqueue", "echo", "--args", e, "--after", UNKNOWN_RUN],
            vec!["--after", UNKNOWN_RUN, "no such run"],
        ),
        (
            vec!["enqueue", "echo", "--args", e, "--after", &a, "--in", "5m"],
            vec!["--after", "--in"],
        ),
        (
            vec![
                "enqueue",
                "echo",
                "--args",
                e,
                "--after",
                &a,
                "--at",
                "2030-01-01T00:00:00Z",
            ],
            vec!["--after", "--at"],
        ),
        (
            vec!["enqueue", "echo", "--args", e, "--after-any"],
            vec!["--after"],
        ),
        (
            vec!["enqueue", "echo", "--args", e, "--batch"],
            vec!["--batch", "--file"],
        ),
        (
            vec!["enqueue", "echo", "--args", e, "--batch-id", "bt_x"],
            vec!["--batch-id \"bt_x\""],
        ),
        (
            vec!["enqueue", "echo", "--args", e, "--batch-id", UNKNOWN_BATCH],
            vec!["--batch-id", UNKNOWN_BATCH, "no such batch"],
        ),
        (
            vec!["enqueue", "--file", &good, "--on-complete", "echo"],
            vec!["--batch"],
        ),
        (
            vec!["enqueue", "--file", &good, "--on-complete-args", "{}"],
            vec!["--on-complete"],
        ),
        (
            vec!["enqueue", "--file", &good, "--title", "t"],
            vec!["'--title'", "--batch"],
        ),
        (
            vec![
                "enqueue",
                "--file",
                &good,
                "--batch",
                "--on-complete",
                "nope",
            ],
            vec!["--on-complete", "nope"],
        ),
        (
            vec![
                "enqueue",
                "--file",
                &good,
                "--batch",
                "--on-complete",
                "echo",
                "--on-complete-args",
                "{bad",
            ],
            vec!["--on-complete-args", "not valid JSON"],
        ),
        (
            vec![
                "enqueue",
                "--file",
                &good,
                "--batch",
                "--on-complete",
                "echo",
                "--on-complete-args",
                r#"{"nope":1}"#,
            ],
            vec!["--on-complete-args", "schema"],
        ),
        (
            vec!["enqueue", "--file", &good, "--batch", "--title", ""],
            vec!["--title", "empty"],
        ),
        (
            vec!["enqueue", "--file", &big, "--batch"],
            vec!["--batch", "4 runs", "runs.max_batch_runs"],
        ),
        (
            vec!["enqueue", "--file", &unknown_ref, "--batch"],
            vec!["unknown_ref.jsonl line 2: after \"nope\"", "ref"],
        ),
        (
            vec!["enqueue", "--file", &cycle],
            vec!["cycle.jsonl", "lines 1 -> 3 -> 2 -> 1", "cycle"],
        ),
        (vec!["enqueue", "--file", &cycle, "--batch"], vec!["cycle"]),
        (
            vec!["enqueue", "--file", &twice],
            vec!["twice.jsonl line 2: ref \"x\"", "line 1"],
        ),
        (
            vec!["enqueue", "--file", &self_ref, "--batch"],
            vec!["own parent"],
        ),
        (
            vec!["enqueue", "--file", &bad_id],
            vec!["bad_id.jsonl line 1: after \"bg_nope\""],
        ),
        (
            vec!["enqueue", "--file", &unknown_parent, "--batch"],
            vec!["unknown_parent.jsonl: after", UNKNOWN_RUN, "no such run"],
        ),
        (
            vec!["enqueue", "--file", &at_and_after],
            vec!["at_after.jsonl line 1: after", "start time"],
        ),
        (
            vec!["enqueue", "--file", &any_alone],
            vec!["any_alone.jsonl line 1: after_any"],
        ),
        (
            vec!["batch", "show", "bt_nope"],
            vec!["batch id \"bt_nope\""],
        ),
        (vec!["batch", "wait", "x"], vec!["batch id \"x\""]),
        (
            vec!["batch", "wait", UNKNOWN_BATCH, "--timeout", "soon"],
            vec!["--timeout \"soon\""],
        ),
        (vec!["batch", "cancel", "bg_1"], vec!["batch id"]),
        (vec!["batch", "retry", "bt_1"], vec!["batch id"]),
        (
            vec!["batch", "list", "--state", "done"],
            vec!["--state \"done\"", "running or completed"],
        ),
        (vec!["batch", "list", "--limit", "0"], vec!["--limit"]),
        (vec!["batch", "list", "--session", ""], vec!["--session"]),
        (vec!["runs", "--batch", "bt_x"], vec!["--batch \"bt_x\""]),
        (vec!["runs", "--parent", "bt_x"], vec!["--parent \"bt_x\""]),
    ];
    let before = written(&site);
    for (args, names) in cases {
        let (code, stdout, err) = out(&site.toolq(&args));
        assert_eq!(code, Some(2), "{args:?}: {err}");
        for n in names {
            assert!(err.contains(n), "{args:?}: stderr should name {n:?}: {err}");
        }
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(written(&site), before, "{args:?} wrote rows");
    }
}

#[test]
fn an_unknown_batch_exits_1_not_found() {
    let site = Site::new();
    let before = written(&site);
    for sub in ["show", "wait", "cancel", "retry"] {
        let (code, stdout, err) = out(&site.toolq(&["batch", sub, UNKNOWN_BATCH]));
        assert_eq!(code, Some(1), "{sub}: {err}");
        assert_eq!(
            err.trim(),
            format!("toolq: batch {UNKNOWN_BATCH} not found"),
            "{sub}"
        );
        assert!(stdout.is_empty(), "{sub}: {stdout}");
    }
    assert_eq!(written(&site), before);
}

#[test]
fn a_file_dag_with_refs_is_one_batch_that_completes_once_with_its_callback() {
    let site = Site::new();
    let path = file(
        &site,
        "dag.jsonl",
        &[
            r#"{"tool":"echo","args":{"message":"join"},"after":["left","right"],"session":"s"}"#
                .into(),
            r#"{"tool":"echo","args":{"message":"root"},"ref":"root","session":"s"}"#.into(),
            r#"{"tool":"echo","args":{"message":"l"},"ref":"left","after":["root"],"session":"s"}"#
                .into(),
            r#"{"tool":"echo","args":{"message":"r"},"ref":"right","after":["root"],"session":"s"}"#
                .into(),
        ],
    );
    let v = json(
        &site,
        &[
            "enqueue",
            "--file",
            &path,
            "--batch",
            "--title",
            "nightly",
            "--on-complete",
            "echo",
            "--on-complete-args",
            r#"{"message":"all done"}"#,
        ],
    );
    let batch = v["batch_id"].as_str().unwrap().to_string();
    assert!(batch.starts_with("bt_"), "{v}");
    assert_eq!(v["enqueued"], 4);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "{v}");
    assert!(runs.iter().all(|r| r["created"] == true));
    let ids: Vec<String> = runs
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(v["ids"][0], ids[0].as_str(), "ids in file order");
    assert_eq!(
        site.db().count("SELECT count(*) FROM run_deps"),
        4,
        "join waits for left and right, each for root"
    );

    let shown = json(&site, &["batch", "show", &batch]);
    assert_eq!(shown["id"], batch.as_str());
    assert_eq!(shown["title"], "nightly");
    assert_eq!(shown["session_id"], "s", "the lines' common session");
    assert_eq!(shown["state"], "running");
    assert_eq!(shown["total"], 4);
    assert_eq!(shown["pending"], 4);
    assert_eq!(shown["states"]["blocked"], 3, "{shown}");
    assert_eq!(shown["states"]["queued"], 1, "{shown}");
    assert_eq!(shown["on_complete"]["tool"], "echo");
    let text = ok(&site, &["batch", "show", &batch]);
    assert!(text.contains("blocked 3, queued 1"), "{text}");
    assert!(text.contains("0 of 4 runs final"), "{text}");
    let listed = json(&site, &["batch", "list", "--state", "running"]);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], batch.as_str());
    assert!(
        json(&site, &["batch", "list", "--state", "completed"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        json(&site, &["runs", "--batch", &batch])
            .as_array()
            .unwrap()
            .len(),
        4
    );
    let shown = ok(&site, &["show", &ids[0]]);
    assert!(shown.contains(&batch), "{shown}");
    assert_eq!(json(&site, &["show", &ids[0]])["links"]["batch_id"], batch);

    drain(&site);
    ok(&site, &["batch", "wait", &batch, "--timeout", "30s"]);
    for id in &ids {
        assert_eq!(site.state(id), "completed", "{id}");
    }
    let done = json(&site, &["batch", "show", &batch]);
    assert_eq!(done["state"], "completed");
    assert_eq!(done["completed"], 4);
    assert_eq!(done["completions"], 1);
    let callback = done["callback_run_id"].as_str().unwrap().to_string();
    assert_eq!(batch_messages(&site, &batch), 1, "exactly one message");
    let text = ok(&site, &["batch", "show", &batch]);
    assert!(text.contains(&callback), "names its callback run: {text}");
    let cb = json(&site, &["show", &callback]);
    assert_eq!(cb["links"]["parents"][0]["parent"], batch.as_str());
    assert_eq!(cb["links"]["parents"][0]["mode"], "batch");
    assert!(ok(&site, &["show", &callback]).contains("callback  completed"));
    let listed = ok(&site, &["batch", "list"]);
    assert!(
        listed.contains(&batch) && listed.contains("completed") && listed.contains("4/4"),
        "{listed}"
    );

    // A completed batch takes no more runs.
    let before = written(&site);
    let (code, _, err) = out(&site.toolq(&[
        "enqueue",
        "echo",
        "--args",
        r#"{"message":"late"}"#,
        "--batch-id",
        &batch,
    ]));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--batch-id") && err.contains("has completed"),
        "{err}"
    );
    assert_eq!(written(&site), before);
}

#[test]
fn a_plain_batch_prints_its_id_runs_join_it_and_refs_work_without_batch() {
    let site = Site::new();
    let lines: Vec<String> = (0..3)
        .map(|i| format!(r#"{{"tool":"echo","args":{{"message":"{i}"}}}}"#))
        .collect();
    let path = file(&site, "three.jsonl", &lines);
    let batch = ok(&site, &["enqueue", "--file", &path, "--batch"])
        .trim()
        .to_string();
    assert!(batch.starts_with("bt_") && !batch.contains('\n'), "{batch}");
    let shown = json(&site, &["batch", "show", &batch]);
    assert_eq!(shown["title"], "batch of 3 runs");
    assert_eq!(shown["session_id"], "default");

    let joined = json(
        &site,
        &[
            "enqueue",
            "echo",
            "--args",
            r#"{"message":"more"}"#,
            "--batch-id",
            &batch,
        ],
    );
    assert_eq!(joined["batch_id"], batch.as_str());
    assert_eq!(json(&site, &["batch", "show", &batch])["total"], 4);

    // --session names the batch's session; --batch-id with --file joins every line.
    let other = ok(
        &site,
        &["enqueue", "--file", &path, "--batch", "--session", "ops"],
    )
    .trim()
    .to_string();
    assert_eq!(json(&site, &["batch", "show", &other])["session_id"], "ops");
    let ids = ok(&site, &["enqueue", "--file", &path, "--batch-id", &other]);
    assert_eq!(ids.lines().count(), 3);
    assert_eq!(json(&site, &["batch", "show", &other])["total"], 6);
    let sessions = json(&site, &["batch", "list", "--session", "ops"]);
    assert_eq!(sessions.as_array().unwrap().len(), 1);

    // Without --batch, refs still link the lines: ids printed one per line.
    let chain = file(
        &site,
        "chain.jsonl",
        &[
            r#"{"tool":"echo","args":{"message":"1"},"ref":"one"}"#.into(),
            r#"{"tool":"echo","args":{"message":"2"},"after":["one"],"after_any":true}"#.into(),
        ],
    );
    let ids: Vec<String> = ok(&site, &["enqueue", "--file", &chain])
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), 2);
    let links = &json(&site, &["show", &ids[1]])["links"];
    assert_eq!(links["parents"][0]["parent"], ids[0].as_str());
    assert_eq!(links["parents"][0]["mode"], "any");
    assert!(links.get("batch_id").is_none(), "{links}");
}

#[test]
fn batch_wait_times_out_with_exit_1_then_returns_once_a_drain_finished_it() {
    let site = Site::new();
    let lines: Vec<String> = (0..5)
        .map(|i| format!(r#"{{"tool":"echo","args":{{"message":"{i}"}}}}"#))
        .collect();
    let path = file(&site, "five.jsonl", &lines);
    let batch = ok(&site, &["enqueue", "--file", &path, "--batch"])
        .trim()
        .to_string();
    let (code, _, err) = out(&site.toolq(&["batch", "wait", &batch, "--timeout", "200ms"]));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("timed out after 200ms") && err.contains("5 of 5 runs not final"),
        "{err}"
    );
    let (code, stdout, err) =
        out(&site.toolq(&["--json", "batch", "wait", &batch, "--timeout", "100ms"]));
    assert_eq!(code, Some(1), "{err}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["ended"], false);
    assert_eq!(v["pending"], 5);

    // A waiter started before the worker returns once the drain ended the batch.
    let waiter = std::process::Command::new(env!("CARGO_BIN_EXE_toolq"))
        .arg("--db")
        .arg(site.db())
        .arg("--config")
        .arg(site.dir.path().join("toolq.toml"))
        .args(["--json", "batch", "wait", &batch, "--timeout", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drain(&site);
    let done = waiter.wait_with_output().unwrap();
    let (code, stdout, err) = out(&done);
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["ended"], true);
    assert_eq!(v["state"], "completed");
    assert_eq!(v["completed"], 5);
    assert_eq!(v["pending"], 0);
}

#[test]
fn batch_cancel_of_500_runs_cancels_all_and_the_batch_sends_one_message() {
    let site = Site::new();
    // Every odd run blocked behind the run before it.
    let lines: Vec<String> = (0..500)
        .map(|i| {
            if i % 2 == 0 {
                format!(r#"{{"ref":"r{i}","tool":"echo","args":{{"message":"{i}"}}}}"#)
            } else {
                format!(
                    r#"{{"tool":"echo","args":{{"message":"{i}"}},"after":["r{}"]}}"#,
                    i - 1
                )
            }
        })
        .collect();
    let path = file(&site, "big.jsonl", &lines);
    let batch = ok(&site, &["enqueue", "--file", &path, "--batch"])
        .trim()
        .to_string();
    assert_eq!(
        json(&site, &["batch", "show", &batch])["states"]["blocked"],
        250
    );

    let dry = json(&site, &["batch", "cancel", &batch, "--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["matched"], 500, "{dry}");
    assert_eq!(
        site.db().count(&format!(
            "SELECT count(*) FROM runs WHERE batch_id = '{batch}' AND state = 'queued'"
        )),
        500,
        "a dry run changes nothing"
    );
    let text = ok(&site, &["batch", "cancel", &batch, "--dry-run"]);
    assert!(
        text.starts_with("500 runs match; nothing was changed"),
        "{text}"
    );

    let done = json(&site, &["batch", "cancel", &batch]);
    assert_eq!(done["action"], "cancel");
    assert_eq!(done["dry_run"], false);
    // Cancelling a parent may cancel its dependent first: each run is cancelled once, by one
    // of the two.
    assert_eq!(
        done["done"].as_i64().unwrap() + done["skipped"].as_i64().unwrap(),
        500,
        "{done}"
    );
    assert_eq!(
        site.db().count(&format!(
            "SELECT count(*) FROM runs WHERE batch_id = '{batch}' AND state = 'cancelled'"
        )),
        500
    );
    let shown = json(&site, &["batch", "show", &batch]);
    assert_eq!(shown["state"], "completed", "{shown}");
    assert_eq!(shown["cancelled"], 500);
    assert_eq!(shown["pending"], 0);
    assert_eq!(batch_messages(&site, &batch), 1, "exactly one message");
    ok(&site, &["batch", "wait", &batch, "--timeout", "5s"]);

    // A retry reopens it; nothing left to cancel afterwards but what the retry queued.
    let again = json(&site, &["batch", "retry", &batch, "--dry-run"]);
    assert_eq!(again["matched"], 500, "{again}");
    let text = ok(&site, &["batch", "retry", &batch]);
    assert!(text.starts_with("retried 500 runs"), "{text}");
    assert_eq!(json(&site, &["batch", "show", &batch])["state"], "running");
    drain(&site);
    let shown = json(&site, &["batch", "show", &batch]);
    assert_eq!(shown["state"], "completed", "{shown}");
    assert_eq!(shown["completed"], 500, "{shown}");
    assert_eq!(shown["completions"], 2);
    assert_eq!(
        batch_messages(&site, &batch),
        2,
        "one more for the second completion"
    );
}

#[test]
fn runs_filter_by_batch_and_parent_and_show_lists_spawned_children() {
    let site = Site::new();
    let parent = echo(&site, "parent", &[]);
    let child = echo(&site, "child", &[]);
    let other = echo(&site, "other", &[]);
    // What spawn_child records: the spawning run on the child's row.
    site.db().exec(&format!(
        "UPDATE runs SET parent_run_id = '{parent}' WHERE id = '{child}'"
    ));
    let listed = json(&site, &["runs", "--parent", &parent]);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![child.as_str()]);
    let text = ok(&site, &["show", &parent]);
    assert!(text.contains("children") && text.contains(&child), "{text}");
    assert!(!text.contains(&other), "{text}");
    let v = json(&site, &["show", &parent]);
    assert_eq!(v["links"]["children"][0]["id"], child.as_str());
    assert_eq!(v["links"]["children"][0]["tool"], "echo");
    assert_eq!(v["links"]["children"][0]["state"], "queued");
    let text = ok(&site, &["show", &child]);
    assert!(
        text.contains("spawned_by") && text.contains(&parent),
        "{text}"
    );
    assert_eq!(
        json(&site, &["show", &child])["links"]["parent_run_id"],
        parent
    );
    // No batch: an empty list, not an error.
    assert!(
        json(&site, &["runs", "--batch", UNKNOWN_BATCH])
            .as_array()
            .unwrap()
            .is_empty()
    );
}
