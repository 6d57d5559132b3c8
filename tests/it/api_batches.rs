//! `/api/v1/batches` over real HTTP: create (refs and after within the request, a callback),
//! list, get, wait (a long poll woken by the change feed), cancel and retry answer what the
//! CLI's `--json` prints; bad input names the run, field and value and writes nothing.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::Api;

/// `toolq --json ARGS` on the API's database, parsed (whatever its exit status).
fn cli_json(api: &Api, args: &[&str]) -> Value {
    let out = api.site.toolq(&[&["--json"], args].concat());
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("toolq {args:?}: {e}: {out:?}"))
}

fn written(api: &Api) -> (i64, i64) {
    let db = api.site.db();
    (
        db.count("SELECT count(*) FROM runs"),
        db.count("SELECT count(*) FROM batches"),
    )
}

#[test]
fn a_batch_is_created_listed_shown_and_waited_for_as_the_cli_prints_it() {
    let api = Api::new();
    let a = api.post(
        "/batches",
        &json!({"session": "s1", "title": "two steps",
        "on_complete": {"tool": "echo", "args": {"message": "done"}},
        "runs": [
            {"tool": "echo", "args": {"message": "first"}, "ref": "a"},
            {"tool": "echo", "args": {"message": "second"}, "after": ["a"], "priority": 3}
        ]}),
    );
    assert_eq!(a.status, 201, "{a:?}");
    let b = a.ok().clone();
    let id = b["batch_id"].as_str().unwrap().to_string();
    assert!(id.starts_with("bt_"), "{b}");
    assert_eq!(b["enqueued"], 2);
    let ids = b["ids"].as_array().unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(b["runs"][0]["id"], ids[0]);
    assert_eq!(b["runs"][1]["run_id"], ids[1]);
    assert_eq!(b["runs"][1]["created"], true);
    // The second waits for the first.
    let second = ids[1].as_str().unwrap();
    let shown = cli_json(&api, &["show", second]);
    assert_eq!(shown["priority"], 3, "{shown}");

    let got = api.get(&format!("/batches/{id}"));
    assert_eq!(got.ok(), &cli_json(&api, &["batch", "show", &id]));
    assert_eq!(got.body["total"], 2);
    assert_eq!(got.body["state"], "running");
    assert_eq!(got.body["session_id"], "s1");
    assert_eq!(got.body["title"], "two steps");
    assert_eq!(got.body["on_complete"]["tool"], "echo");

    let list = api.get("/batches?session=s1");
    assert_eq!(
        list.ok(),
        &cli_json(&api, &["batch", "list", "--session", "s1"])
    );
    assert_eq!(list.body.as_array().unwrap().len(), 1);
    assert_eq!(api.get("/batches?state=completed").ok(), &json!([]));
    assert_eq!(
        api.get(&format!("/batches?before={id}")).ok(),
        &json!([]),
        "nothing is older"
    );

    // A wait that times out answers `ended: false`.
    let t = Instant::now();
    let w = api.get(&format!("/batches/{id}/wait?timeout=300ms"));
    assert!(t.elapsed() >= Duration::from_millis(300), "{w:?}");
    assert_eq!(w.ok()["ended"], false);
    assert_eq!(w.body["pending"], 2);

    // With a worker, the long poll answers once the batch completes.
    let _worker = api.site.worker();
    let w = api.get(&format!("/batches/{id}/wait?timeout=60s"));
    assert_eq!(w.ok()["ended"], true, "{w:?}");
    assert_eq!(w.body["state"], "completed");
    assert_eq!(w.body["completed"], 2);
    assert_eq!(w.body["pending"], 0);
    assert!(w.body["callback_run_id"].is_string(), "{w:?}");
    assert_eq!(
        w.body,
        cli_json(&api, &["batch", "wait", &id, "--timeout", "1s"])
    );
    let done = api.get("/batches?state=completed");
    assert_eq!(done.ok().as_array().unwrap().len(), 1);
}

#[test]
fn a_batch_is_cancelled_and_retried_as_the_cli_does() {
    let api = Api::new();
    let a = api.post(
        "/batches",
        &json!({"runs": [{"tool": "echo", "args": {"message": "1"}, "session": "x"},
                         {"tool": "echo", "args": {"message": "2"}, "session": "x"}]}),
    );
    let b = a.ok().clone();
    let id = b["batch_id"].as_str().unwrap().to_string();
    // The runs' common session is the batch's; its default title counts them.
    let got = api.get(&format!("/batches/{id}"));
    assert_eq!(got.ok()["session_id"], "x");
    assert_eq!(got.body["title"], "batch of 2 runs");

    let dry = api.post(&format!("/batches/{id}/cancel"), &json!({"dry_run": true}));
    assert_eq!(
        dry.ok(),
        &cli_json(&api, &["batch", "cancel", &id, "--dry-run"])
    );
    assert_eq!(dry.body["matched"], 2);
    assert_eq!(dry.body["dry_run"], true);
    let c = api.call("POST", &format!("/batches/{id}/cancel"), &[], None);
    assert_eq!(c.ok()["action"], "cancel");
    assert_eq!(c.body["cancelled"], 2);
    let w = api.get(&format!("/batches/{id}/wait?timeout=10s"));
    assert_eq!(w.ok()["ended"], true, "{w:?}");
    assert_eq!(w.body["cancelled"], 2);
    assert_eq!(w.body["first_failures"].as_array().unwrap().len(), 2);

    let r = api.post(&format!("/batches/{id}/retry"), &json!({}));
    assert_eq!(r.ok()["action"], "retry");
    assert_eq!(r.body["retried"], 2);
    let got = api.get(&format!("/batches/{id}"));
    assert_eq!(got.ok()["state"], "running");
    assert_eq!(got.body["pending"], 2);
    let p = api
        .post(&format!("/batches/{id}/retry"), &json!({"dry": true}))
        .problem(400)
        .clone();
    assert!(p["detail"].as_str().unwrap().contains("dry"), "{p}");
}

#[test]
fn a_bad_batch_names_the_run_field_and_value_and_writes_nothing() {
    let api = Api::new();
    let echo = |m: &str| json!({"tool": "echo", "args": {"message": m}});
    let bad = |body: Value, field: &str, value: Option<&str>| {
        let a = api.post("/batches", &body);
        let p = a.problem(400).clone();
        assert_eq!(p["field"], field, "{body}: {p}");
        if let Some(v) = value {
            assert_eq!(p["value"], v, "{body}: {p}");
        }
        p
    };
    bad(json!({"runs": []}), "runs", None);
    let p = api
        .post("/batches", &json!({"title": "x"}))
        .problem(400)
        .clone();
    assert!(p["detail"].as_str().unwrap().contains("runs"), "{p}");
    bad(
        json!({"runs": [echo("a"), {"tool": "echo", "args": {"message": "b"}, "priority": "high"}]}),
        "runs[1].priority",
        None,
    );
    bad(
        json!({"runs": [echo("a"), {"tool": "nope"}]}),
        "runs[1]: tool",
        Some("nope"),
    );
    bad(
        json!({"runs": [echo("a"), {"tool": "echo", "args": {"message": "b"}, "timeout": "soon"}]}),
        "runs[1]: timeout",
        Some("soon"),
    );
    bad(
        json!({"runs": [echo("a"), {"tool": "echo", "args": {"message": "b"}, "after": ["zzz"]}]}),
        "runs[1]: after",
        Some("zzz"),
    );
    bad(
        json!({"runs": [
            {"tool": "echo", "args": {"message": "a"}, "ref": "a", "after": ["b"]},
            {"tool": "echo", "args": {"message": "b"}, "ref": "b", "after": ["a"]}]}),
        "runs: after",
        None,
    );
    bad(
        json!({"runs": [echo("a")], "on_complete": {"tool": "nope"}}),
        "on_complete: tool",
        Some("nope"),
    );
    bad(
        json!({"runs": [echo("a")], "session": " "}),
        "session",
        None,
    );
    let p = api
        .post("/batches", &json!({"runs": [echo("a")], "callback": {}}))
        .problem(400)
        .clone();
    assert!(p["detail"].as_str().unwrap().contains("callback"), "{p}");
    assert_eq!(written(&api), (0, 0));

    // Queries and ids.
    let p = api.get("/batches?limit=0").problem(400).clone();
    assert_eq!((&p["field"], &p["value"]), (&json!("limit"), &json!("0")));
    let p = api.get("/batches?state=done").problem(400).clone();
    assert_eq!(
        (&p["field"], &p["value"]),
        (&json!("state"), &json!("done"))
    );
    let p = api.get("/batches?before=bg_1").problem(400).clone();
    assert_eq!(p["field"], "before");
    let sch = format!("sch_{}", "0".repeat(32));
    let p = api.get(&format!("/batches/{sch}")).problem(400).clone();
    assert_eq!(
        (&p["field"], &p["value"]),
        (&json!("batch id"), &json!(sch))
    );
    let unknown = format!("bt_{}", "0".repeat(32));
    api.get(&format!("/batches/{unknown}")).problem(404);
    api.get(&format!("/batches/{unknown}/wait?timeout=1s"))
        .problem(404);
    api.post(&format!("/batches/{unknown}/cancel"), &json!({}))
        .problem(404);
    api.post(&format!("/batches/{unknown}/retry"), &json!({}))
        .problem(404);
    let p = api
        .get(&format!("/batches/{unknown}/wait?timeout=10m"))
        .problem(400)
        .clone();
    assert_eq!(
        (&p["field"], &p["value"]),
        (&json!("timeout"), &json!("10m"))
    );
    assert_eq!(written(&api), (0, 0));
}
