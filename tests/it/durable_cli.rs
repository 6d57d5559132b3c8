//! Issue 35, the operator's side in the CLI: `toolq signal` (bad input, unknown and finished
//! runs, a second delivery of a name, a run woken), and what `show` and `runs` say about a
//! run that waits, with its recorded steps and events. State is written as rows (what the
//! worker would have recorded), so the rendering is what is under test.

use serde_json::Value;

use crate::web::Site;

/// The far-future instant a wait without timeout is due at.
pub const NEVER: &str = "9999-12-31T23:59:59.999Z";

/// An `echo` run suspended on event `go` (no timeout), snoozed twice, with four recorded
/// steps (done, sleep, failed, the waiting event wait) and two events (one taken, one not).
pub fn waiting_run(site: &Site) -> String {
    let id = site.enqueue(&[
        "echo",
        "--args",
        r#"{"message":"x"}"#,
        "--title",
        "deploy journey",
    ]);
    let long = "x".repeat(300);
    site.db().exec(&format!(
        "UPDATE runs SET wait_kind = 'event', wait_event = 'go', run_at = '{NEVER}', \
         snoozes = 2 WHERE id = '{id}';
         INSERT INTO step_records (run_id, seq, name, kind, status, output, error, wake_at, \
           attempt, recorded_at) VALUES
           ('{id}', 1, 'fetch', 'step', 'done', '{{\"rows\":42,\"blob\":\"{long}\"}}', NULL, \
            NULL, 1, '2026-01-02T03:04:01.000Z'),
           ('{id}', 2, 'sleep#1', 'sleep', 'done', 'null', NULL, '2026-01-02T03:04:03.000Z', \
            1, '2026-01-02T03:04:02.000Z'),
           ('{id}', 3, 'upload', 'step', 'failed', NULL, 'connection reset by peer', NULL, 1, \
            '2026-01-02T03:04:04.000Z'),
           ('{id}', 4, 'event:go', 'event', 'waiting', NULL, NULL, '{NEVER}', 1, \
            '2026-01-02T03:04:05.000Z');
         INSERT INTO run_events (run_id, name, payload, sent_at, sent_by, consumed_at) VALUES
           ('{id}', 'early', '{{\"note\":\"sent before\"}}', '2026-01-02T03:04:00.500Z', \
            'alice', '2026-01-02T03:04:01.500Z'),
           ('{id}', 'other', 'null', '2026-01-02T03:04:06.000Z', NULL, NULL);"
    ));
    id
}

fn out(o: &std::process::Output) -> (Option<i32>, String, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn events(site: &Site) -> i64 {
    site.db().count("SELECT count(*) FROM run_events")
}

#[test]
fn signal_refuses_bad_input_with_exit_2_naming_what_was_wrong_and_stores_nothing() {
    let site = Site::new();
    let id = site.enqueue(&["echo", "--args", r#"{"message":"x"}"#]);
    let long = "e".repeat(201);
    for (args, names) in [
        (vec!["signal", &id, "go", "--payload", "{bad"], "--payload"),
        (vec!["signal", "bg_nope", "go"], "run id"),
        (vec!["signal", &id, ""], "event"),
        (vec!["signal", &id, "a\u{7}b"], "event"),
        (vec!["signal", &id, &long], "event"),
    ] {
        let (code, stdout, err) = out(&site.toolq(&args));
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("toolq: ") && err.contains(names),
            "{args:?}: {err}"
        );
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
    assert_eq!(events(&site), 0, "nothing stored");
}

#[test]
fn signal_an_unknown_or_finished_run_or_a_name_twice_exits_1_with_the_reason() {
    let site = Site::new();
    let (code, _, err) = out(&site.toolq(&["signal", "bg_01a20c6dd2ed72d48a2475a7a796b89c", "go"]));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not found"), "{err}");

    let done = site.enqueue(&["echo", "--args", r#"{"message":"x"}"#]);
    assert!(site.toolq(&["cancel", &done]).status.success());
    let (code, _, err) = out(&site.toolq(&["signal", &done, "go"]));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("already cancelled"),
        "names the run's state: {err}"
    );

    let id = site.enqueue(&["echo", "--args", r#"{"message":"x"}"#]);
    let (code, stdout, err) = out(&site.toolq(&[
        "signal",
        &id,
        "go",
        "--payload",
        r#"{"ok":true}"#,
        "--by",
        "alice",
    ]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        stdout.trim(),
        format!("sent event \"go\" to {id}; kept until the run waits for it")
    );
    let (code, _, err) = out(&site.toolq(&["signal", &id, "go", "--by", "bob"]));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("already sent") && err.contains("by alice"),
        "names the first: {err}"
    );
    assert_eq!(events(&site), 1, "the first delivery wins");
    assert_eq!(
        site.db().text("SELECT payload FROM run_events").as_deref(),
        Some(r#"{"ok":true}"#)
    );
}

#[test]
fn signal_wakes_a_run_that_waits_for_the_event_and_json_says_so() {
    let site = Site::new();
    let id = waiting_run(&site);
    let o = site.toolq(&["--json", "signal", &id, "go", "--payload", "[1,2]"]);
    let (code, stdout, err) = out(&o);
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["run_id"], id.as_str());
    assert_eq!(v["event"], "go");
    assert_eq!(v["woke"], true);
    let show: Value = serde_json::from_slice(&site.toolq(&["--json", "show", &id]).stdout).unwrap();
    assert!(
        show["run_at"].as_str().unwrap() < "9999",
        "due now: {}",
        show["run_at"]
    );
    // Text: one line that says the run resumes.
    let other = waiting_run(&site);
    let (_, stdout, _) = out(&site.toolq(&["signal", &other, "go"]));
    assert_eq!(
        stdout.trim(),
        format!("sent event \"go\" to {other}; the run was waiting for it and resumes now")
    );
}

#[test]
fn show_and_runs_say_what_a_run_waits_for_with_its_steps_and_events() {
    let site = Site::new();
    let id = waiting_run(&site);
    let (code, text, err) = out(&site.toolq(&["show", &id]));
    assert_eq!(code, Some(0), "{err}");
    let line = |key: &str| -> String {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} line:\n{text}"))
            .to_string()
    };
    assert!(line("state").ends_with("queued"), "{text}");
    assert!(
        line("waiting").contains(r#"event "go" (no timeout)"#),
        "{text}"
    );
    assert!(line("snoozes").ends_with('2'), "{text}");
    let after = |key: &str| -> Vec<&str> {
        text.lines()
            .skip_while(|l| l.split_whitespace().next() != Some(key))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .collect()
    };
    let steps = after("steps");
    assert_eq!(steps.len(), 4, "{text}");
    assert!(
        steps[0].contains("fetch") && steps[0].contains("done"),
        "{text}"
    );
    assert!(
        steps[0].contains("attempt 1") && steps[0].ends_with('…'),
        "cut: {text}"
    );
    assert!(steps[0].chars().count() < 200, "{text}");
    assert!(
        steps[2].contains("error: connection reset by peer"),
        "{text}"
    );
    assert!(
        steps[3].contains("event:go") && steps[3].contains("waiting"),
        "{text}"
    );
    let events = after("events");
    assert_eq!(events.len(), 2, "{text}");
    assert!(
        events[0].contains("early") && events[0].contains("by alice"),
        "{text}"
    );
    assert!(
        events[0].contains("consumed 2026-01-02T03:04:01.500Z"),
        "{text}"
    );
    assert!(
        events[1].contains("other") && events[1].contains("pending"),
        "{text}"
    );

    let v: Value = serde_json::from_slice(&site.toolq(&["--json", "show", &id]).stdout).unwrap();
    assert_eq!(v["waiting"]["kind"], "event");
    assert_eq!(v["waiting"]["event"], "go");
    assert_eq!(v["snoozes"], 2);
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    assert_eq!(steps[0]["name"], "fetch");
    assert_eq!(steps[0]["output"]["rows"], 42);
    assert_eq!(steps[2]["error"], "connection reset by peer");
    assert_eq!(steps[3]["status"], "waiting");
    let events = v["events"].as_array().unwrap();
    assert_eq!(events[0]["name"], "early");
    assert_eq!(events[0]["payload"]["note"], "sent before");
    assert!(events[1]["consumed_at"].is_null());
    // The fields every run had before are all still there.
    for key in ["id", "state", "held", "timeout_effective_ms", "result_path"] {
        assert!(v.get(key).is_some(), "{key}: {v}");
    }

    // A run with no journal: no steps or events lines, empty arrays, waiting null.
    let plain = site.enqueue(&["echo", "--args", r#"{"message":"x"}"#]);
    let (_, text, _) = out(&site.toolq(&["show", &plain]));
    assert!(
        !text.contains("\nsteps") && !text.contains("\nwaiting"),
        "{text}"
    );
    let v: Value = serde_json::from_slice(&site.toolq(&["--json", "show", &plain]).stdout).unwrap();
    assert!(v["waiting"].is_null() && v["snoozes"] == 0, "{v}");
    assert_eq!(v["steps"], serde_json::json!([]));
    assert_eq!(v["events"], serde_json::json!([]));

    // `runs`: the waiting run says what it waits for; --json rows carry `waiting`.
    let (_, table, _) = out(&site.toolq(&["runs"]));
    let row = table.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(
        row.contains("queued") && row.contains(r#"waits event "go""#),
        "{table}"
    );
    let rows: Value = serde_json::from_slice(&site.toolq(&["--json", "runs"]).stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap();
    assert_eq!(row["waiting"]["event"], "go");
}
