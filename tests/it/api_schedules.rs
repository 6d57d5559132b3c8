//! `/api/v1/schedules` over real HTTP: add, list, get, disable, enable, cancel answer what the
//! CLI's `--json` prints; bad input names its field and value and writes nothing.

use serde_json::{Value, json};

use crate::api::Api;

/// `toolq --json ARGS` on the API's database, parsed.
fn cli_json(api: &Api, args: &[&str]) -> Value {
    let out = api.site.toolq(&[&["--json"], args].concat());
    assert!(out.status.success(), "toolq {args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn schedules(api: &Api) -> i64 {
    api.site.db().count("SELECT count(*) FROM schedules")
}

#[test]
fn a_schedule_is_added_listed_shown_disabled_enabled_and_cancelled_as_the_cli_prints_it() {
    let api = Api::new();
    let a = api.post(
        "/schedules",
        &json!({"tool": "echo", "args": {"message": "tick"}, "cron": "*/15 * * * *",
                "tz": "Europe/Berlin", "session": "ops", "title": "ticks", "priority": 5,
                "timeout": "2m", "missed": "skip", "overlap": "allow", "catchup_window": "30m",
                "max_attempts": 2, "no_signal": true, "delivery": "silent"}),
    );
    assert_eq!(a.status, 201, "{a:?}");
    let s = a.ok().clone();
    let id = s["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("sch_"), "{s}");
    assert_eq!(s["cron_expression"], "*/15 * * * *");
    assert_eq!(s["timezone"], "Europe/Berlin");
    assert_eq!(s["session_id"], "ops");
    assert_eq!(s["title"], "ticks");
    assert_eq!(s["priority"], 5);
    assert_eq!(s["timeout_ms"], 120_000);
    assert_eq!(s["catchup_window_ms"], 1_800_000);
    assert_eq!(s["missed_policy"], "skip");
    assert_eq!(s["overlap_policy"], "allow");
    assert_eq!(s["max_attempts"], 2);
    assert_eq!(s["signal_on_completion"], false);
    assert_eq!(s["delivery"], "silent");
    assert_eq!(s["enabled"], true);

    // The list and the detail are the CLI's.
    let list = api.get("/schedules?session=ops");
    assert_eq!(
        list.ok(),
        &cli_json(&api, &["schedule", "list", "--session", "ops"])
    );
    assert_eq!(list.body[0], s);
    assert_eq!(api.get("/schedules?session=other").ok(), &json!([]));
    assert_eq!(api.get("/schedules").ok().as_array().unwrap().len(), 1);
    let detail = api.get(&format!("/schedules/{id}"));
    assert_eq!(detail.ok(), &cli_json(&api, &["schedule", "show", &id]));
    assert_eq!(detail.body["schedule"], s);
    assert_eq!(detail.body["next_fires"].as_array().unwrap().len(), 5);

    // Disable (not cancelled), enable, cancel; each twice is a conflict.
    let d = api.post(&format!("/schedules/{id}/disable"), &json!({}));
    assert_eq!(d.ok()["enabled"], false);
    assert_eq!(d.body["cancelled_at"], Value::Null);
    api.post(&format!("/schedules/{id}/disable"), &json!({}))
        .problem(409);
    let e = api.post(&format!("/schedules/{id}/enable"), &json!({}));
    assert_eq!(e.ok()["enabled"], true);
    assert!(e.body["next_trigger_at"].is_string(), "{e:?}");
    api.post(&format!("/schedules/{id}/enable"), &json!({}))
        .problem(409);
    // An action's body may be empty.
    let c = api.call("POST", &format!("/schedules/{id}/cancel"), &[], None);
    assert_eq!(c.ok()["enabled"], false);
    assert!(c.body["cancelled_at"].is_string(), "{c:?}");
    assert_eq!(
        c.body,
        cli_json(&api, &["schedule", "show", &id])["schedule"]
    );
    api.post(&format!("/schedules/{id}/cancel"), &json!({}))
        .problem(409);

    // A one-shot, with the defaults.
    let at = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let one = api.post(
        "/schedules",
        &json!({"tool": "echo", "args": {"message": "once"}, "at": at}),
    );
    assert_eq!(one.status, 201, "{one:?}");
    assert_eq!(one.body["schedule_type"], "oneshot");
    assert_eq!(one.body["session_id"], "default");
    assert_eq!(one.body["missed_policy"], "once");
    assert_eq!(one.body["signal_on_completion"], true);
    assert_eq!(schedules(&api), 2);
}

#[test]
fn a_bad_schedule_names_its_field_and_value_and_writes_nothing() {
    let api = Api::new();
    let echo = |extra: Value| {
        let mut body = json!({"tool": "echo", "args": {"message": "x"}});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let bad = |body: Value, field: &str, value: Option<&str>| {
        let a = api.post("/schedules", &body);
        let p = a.problem(400).clone();
        assert_eq!(p["field"], field, "{body}: {p}");
        if let Some(v) = value {
            assert_eq!(p["value"], v, "{body}: {p}");
            assert!(p["detail"].as_str().unwrap().contains(v), "{p}");
        }
        p
    };
    bad(
        echo(json!({"cron": "61 * * * *"})),
        "cron",
        Some("61 * * * *"),
    );
    bad(
        echo(json!({"cron": "@sometimes"})),
        "cron",
        Some("@sometimes"),
    );
    bad(
        echo(json!({"cron": "0 * * * *", "tz": "Mars/Olympus"})),
        "tz",
        Some("Mars/Olympus"),
    );
    bad(
        echo(json!({"at": "2020-01-01T00:00:00Z"})),
        "at",
        Some("2020-01-01T00:00:00Z"),
    );
    bad(
        echo(json!({"at": "2030-01-01T00:00:00"})),
        "at",
        Some("2030-01-01T00:00:00"),
    );
    bad(
        echo(json!({"cron": "0 * * * *", "at": "2030-01-01T00:00:00Z"})),
        "at",
        None,
    );
    bad(echo(json!({})), "cron", None);
    bad(
        echo(json!({"cron": "0 * * * *", "timeout": "soon"})),
        "timeout",
        Some("soon"),
    );
    bad(
        echo(json!({"cron": "0 * * * *", "catchup_window": "400d"})),
        "catchup_window",
        Some("400d"),
    );
    bad(
        echo(json!({"cron": "0 * * * *", "missed": "sometimes"})),
        "missed",
        None,
    );
    bad(
        echo(json!({"cron": "0 * * * *", "priority": "high"})),
        "priority",
        None,
    );
    bad(
        json!({"tool": "nope", "cron": "0 * * * *"}),
        "tool",
        Some("nope"),
    );
    let p = bad(
        json!({"tool": "echo", "args": {"wrong": 1}, "cron": "0 * * * *"}),
        "args",
        None,
    );
    assert!(p["detail"].as_str().unwrap().contains("message"), "{p}");
    // Unknown fields (a flag that does not exist) are refused.
    let p = api
        .post(
            "/schedules",
            &echo(json!({"cron": "0 * * * *", "every": "5m"})),
        )
        .problem(400)
        .clone();
    assert!(p["detail"].as_str().unwrap().contains("every"), "{p}");
    assert_eq!(schedules(&api), 0);
}

#[test]
fn schedule_ids_of_the_wrong_kind_are_400_and_unknown_ones_404() {
    let api = Api::new();
    let run = format!("bg_{}", "0".repeat(32));
    for path in [
        format!("/schedules/{run}"),
        format!("/schedules/{run}/enable"),
    ] {
        let a = if path.ends_with("enable") {
            api.post(&path, &json!({}))
        } else {
            api.get(&path)
        };
        let p = a.problem(400);
        assert_eq!(p["field"], "schedule id", "{p}");
        assert_eq!(p["value"], run.as_str());
    }
    let p = api
        .get("/schedules/..%2F..%2Fetc%2Fpasswd")
        .problem(400)
        .clone();
    assert_eq!(p["field"], "schedule id", "{p}");
    let unknown = format!("sch_{}", "0".repeat(32));
    api.get(&format!("/schedules/{unknown}")).problem(404);
    for act in ["enable", "disable", "cancel"] {
        api.post(&format!("/schedules/{unknown}/{act}"), &json!({}))
            .problem(404);
    }
    let p = api.get("/schedules?session=").problem(400).clone();
    assert_eq!(p["field"], "session");
    let p = api.get("/schedules?sesion=ops").problem(400).clone();
    assert!(p["detail"].as_str().unwrap().contains("sesion"), "{p}");
}
