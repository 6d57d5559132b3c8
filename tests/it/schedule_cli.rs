//! `toolq schedule ...` through the real binary: preview, add/list/show/cancel/enable, and
//! bad input (exit 2, a message naming the value, nothing written).

use crate::support::toolq;

use serde_json::Value;

fn ok_json(db: &crate::support::TestDb, args: &[&str]) -> Value {
    let o = toolq(db, args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn schedules(db: &crate::support::TestDb) -> i64 {
    db.count("SELECT count(*) FROM schedules")
}

#[test]
fn preview_prints_utc_and_local_fires_across_dst() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let v = ok_json(
        &db,
        &[
            "--json",
            "schedule",
            "preview",
            "--cron",
            "30 1 * * *",
            "--tz",
            "America/Chicago",
            "--from",
            "2026-10-31T12:00:00Z",
            "--count",
            "2",
        ],
    );
    let utc: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["utc"].as_str().unwrap())
        .collect();
    assert_eq!(utc, ["2026-11-01T06:30:00Z", "2026-11-02T07:30:00Z"]);
    assert_eq!(v[0]["local"], "2026-11-01T01:30:00-05:00 CDT");
    assert_eq!(v[1]["local"], "2026-11-02T01:30:00-06:00 CST");
    // Every 15 minutes in Chicago on the fall-back day: 100 fires.
    let v = ok_json(
        &db,
        &[
            "--json",
            "schedule",
            "preview",
            "--cron",
            "*/15 * * * *",
            "--tz",
            "America/Chicago",
            "--from",
            "2026-11-01T04:59:59Z",
            "--count",
            "100",
        ],
    );
    assert_eq!(v[99]["utc"], "2026-11-02T05:45:00Z");
    let o = toolq(&db, &["schedule", "preview", "--cron", "0 9 * * *"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("UTC"));
}

#[test]
fn add_list_show_cancel_enable() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let s = ok_json(
        &db,
        &[
            "--json",
            "schedule",
            "add",
            "echo",
            "--args",
            r#"{"message":"ping"}"#,
            "--cron",
            "0 9 * * MON-FRI",
            "--tz",
            "America/Chicago",
            "--session",
            "ops",
            "--title",
            "weekday check",
            "--missed",
            "all",
            "--overlap",
            "allow",
            "--catchup-window",
            "2h",
        ],
    );
    let id = s["id"].as_str().unwrap().to_string();
    assert_eq!(s["schedule_type"], "recurring");
    assert_eq!(s["missed_policy"], "all");
    assert_eq!(s["overlap_policy"], "allow");
    assert_eq!(s["catchup_window_ms"], 7_200_000);
    let once = ok_json(
        &db,
        &[
            "--json",
            "schedule",
            "add",
            "echo",
            "--args",
            r#"{"message":"once"}"#,
            "--at",
            "2099-01-01T00:00:00+02:00",
        ],
    );
    assert_eq!(once["next_trigger_at"], "2098-12-31T22:00:00Z");
    let list = ok_json(&db, &["--json", "schedule", "list", "--session", "ops"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    let d = ok_json(&db, &["--json", "schedule", "show", &id]);
    assert_eq!(d["next_fires"].as_array().unwrap().len(), 5);
    assert_eq!(d["schedule"]["title"], "weekday check");
    let o = toolq(&db, &["schedule", "show", &id]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("next fires:") && text.contains("recent occurrences:"),
        "{text}"
    );
    let c = ok_json(&db, &["--json", "schedule", "cancel", &id]);
    assert_eq!(c["enabled"], false);
    let o = toolq(&db, &["schedule", "cancel", &id]);
    assert_eq!(o.status.code(), Some(1));
    let e = ok_json(&db, &["--json", "schedule", "enable", &id]);
    assert_eq!(e["enabled"], true);
    // Disable stops the ticks without marking it cancelled; twice is a conflict.
    let d = ok_json(&db, &["--json", "schedule", "disable", &id]);
    assert_eq!(
        (&d["enabled"], &d["cancelled_at"]),
        (&Value::Bool(false), &Value::Null)
    );
    assert_eq!(d["next_trigger_at"], Value::Null);
    let o = toolq(&db, &["schedule", "disable", &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not enabled"),
        "{o:?}"
    );
    let e = ok_json(&db, &["--json", "schedule", "enable", &id]);
    assert_eq!(e["enabled"], true);
    assert_eq!(schedules(&db), 2);
}

#[test]
fn bad_schedules_exit_2_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (
            &["--cron", "61 * * * *"],
            "cron \"61 * * * *\": minute 61 is outside 0-59",
        ),
        (
            &["--cron", "0 9 * * *", "--tz", "Mars/Base"],
            "unknown time zone \"Mars/Base\"",
        ),
        (&["--at", "2001-01-01T00:00:00Z"], "is in the past"),
        (&["--at", "2099-01-01T00:00:00"], "has no UTC offset"),
        (&["--at", "next tuesday"], "is not an RFC 3339 timestamp"),
        (
            &["--cron", "* * * * *", "--at", "2099-01-01T00:00:00Z"],
            "'--cron <EXPR>' cannot be used with '--at <RFC3339>'",
        ),
        (&[], "<--cron <EXPR>|--at <RFC3339>>"),
        (
            &["--cron", " "],
            "give exactly one of --cron (recurring) or --at (one-shot)",
        ),
        (
            &["--cron", "* * * * *", "--max-attempts", "0"],
            "--max-attempts \"0\": must be between 1 and 1000",
        ),
        (
            &["--cron", "* * * * *", "--timeout", "soon"],
            "--timeout \"soon\"",
        ),
        (
            &["--cron", "* * * * *", "--delivery", "loud"],
            "--delivery \"loud\"",
        ),
        (
            &["--cron", "* * * * *", "--priority", "2000000"],
            "--priority \"2000000\"",
        ),
        (
            &["--cron", "* * * * *", "--missed", "sometimes"],
            "--missed \"sometimes\"",
        ),
        (
            &["--cron", "* * * * *", "--overlap", "never"],
            "--overlap \"never\"",
        ),
        (&["--cron", "* * * * *", "--args", "{"], "--args"),
    ];
    for (extra, want) in cases {
        let mut args = vec!["schedule", "add", "get_current_time"];
        args.extend_from_slice(extra);
        let o = toolq(&db, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err} should contain {want}");
        assert!(
            !err.contains("cron_expression") && !err.contains("max_attempts"),
            "{args:?}: {err} names a column, not a flag"
        );
    }
    let o = toolq(&db, &["schedule", "add", "nope", "--cron", "* * * * *"]);
    assert_eq!(o.status.code(), Some(2));
    let o = toolq(&db, &["schedule", "preview", "--cron", "* * * *"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected 5 fields"));
    let o = toolq(&db, &["schedule", "show", "sch_x"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(schedules(&db), 0);
}
