//! Tags (issue 39): given at enqueue (library, CLI, enqueue file, API), by a schedule (copied
//! to each run it fires) and by spawn_background; stored in runs.tags and run_tags; read back
//! by show and the JSON; filtered by `runs --tag`, the bulk filters and `GET /runs?tag=`; bad
//! tags refused with exit 2 writing nothing; prune removes a run's run_tags rows.

use serde_json::{Value, json};
use toolq::retention::PruneOptions;
use toolq::run::ListFilter;
use toolq::run::Tags;
use toolq::{BulkOptions, EnqueueRequest, RunFilter, RunId};

use crate::schedules::rows;
use crate::support::{TestEnv, t, toolq};

/// Arguments `echo` accepts.
const ARGS: &str = r#"{"message": "x"}"#;

fn tags(items: &[&str]) -> Tags {
    Tags::parse_all(items).unwrap()
}

async fn enqueue(env: &TestEnv, items: &[&str]) -> RunId {
    let req = EnqueueRequest::new("echo", json!({"message": "tagged"})).tags(tags(items));
    env.client.enqueue(req).await.unwrap().run_id
}

fn json_out(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn tags_are_stored_indexed_and_read_back() {
    let env = TestEnv::new();
    let id = enqueue(&env, &["env=prod", "customer=acme"]).await;
    let plain = enqueue(&env, &[]).await;
    let run = env.client.get(&id).await.unwrap();
    assert_eq!(run.tags, tags(&["customer=acme", "env=prod"]));
    assert_eq!(run.traceparent, None);
    assert_eq!(
        rows(&env, &format!("SELECT tags FROM runs WHERE id = '{id}'")),
        [[r#"{"customer":"acme","env":"prod"}"#]]
    );
    assert_eq!(
        rows(
            &env,
            &format!("SELECT tag FROM run_tags WHERE run_id = '{id}' ORDER BY tag")
        ),
        [["customer=acme"], ["env=prod"]]
    );
    // An untagged run: NULL and no row; its JSON still has `"tags": {}`.
    assert_eq!(
        rows(&env, &format!("SELECT tags FROM runs WHERE id = '{plain}'")),
        [["NULL"]]
    );
    assert_eq!(env.count("SELECT count(*) FROM run_tags"), 2);
    let v = serde_json::to_value(env.client.get(&plain).await.unwrap()).unwrap();
    assert_eq!((&v["tags"], &v["traceparent"]), (&json!({}), &Value::Null));

    // The CLI: show prints them, --json carries them.
    let shown = toolq(&env.db, &["show", id.as_str()]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("customer=acme, env=prod"), "{text}");
    let v = json_out(&toolq(&env.db, &["--json", "show", id.as_str()]));
    assert_eq!(v["tags"], json!({"customer": "acme", "env": "prod"}), "{v}");

    // A traceparent given by the caller is stored as given.
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut req = EnqueueRequest::new("echo", json!({"message": "x"}));
    req.traceparent = Some(tp.into());
    let traced = env.client.enqueue(req).await.unwrap().run_id;
    let run = env.client.get(&traced).await.unwrap();
    assert_eq!(run.traceparent.as_deref(), Some(tp));
}

#[tokio::test]
async fn the_cli_enqueues_and_lists_by_tag() {
    let env = TestEnv::new();
    let db = &env.db;
    let one = json_out(&toolq(
        db,
        &[
            "--json",
            "enqueue",
            "echo",
            "--args",
            ARGS,
            "--tag",
            "customer=acme",
            "--tag",
            "env=prod",
        ],
    ));
    let two = json_out(&toolq(
        db,
        &[
            "--json",
            "enqueue",
            "echo",
            "--args",
            ARGS,
            "--tag",
            "customer=acme",
        ],
    ));
    let _other = json_out(&toolq(
        db,
        &[
            "--json",
            "enqueue",
            "echo",
            "--args",
            ARGS,
            "--tag",
            "customer=globex",
        ],
    ));
    // An enqueue file's line carries "tags".
    let file = env.dir.path().join("runs.jsonl");
    std::fs::write(
        &file,
        "{\"tool\": \"echo\", \"args\": {\"message\": \"x\"}, \"tags\": {\"customer\": \"acme\", \"batch\": \"f\"}}\n",
    )
    .unwrap();
    let three = json_out(&toolq(
        db,
        &["--json", "enqueue", "--file", file.to_str().unwrap()],
    ));
    let three = three["ids"][0].as_str().unwrap().to_string();

    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["--json", "runs"];
        all.extend(args);
        json_out(&toolq(db, &all))
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (one, two) = (
        one["id"].as_str().unwrap().to_string(),
        two["id"].as_str().unwrap().to_string(),
    );
    assert_eq!(
        ids(&["--tag", "customer=acme"]),
        [three.clone(), two.clone(), one.clone()],
        "newest first"
    );
    assert_eq!(
        ids(&["--tag", "customer=acme", "--tag", "env=prod"]),
        std::slice::from_ref(&one),
        "every tag must match"
    );
    assert_eq!(
        ids(&[
            "--tag",
            "customer=acme",
            "--tag",
            "batch=f",
            "--tool",
            "echo"
        ]),
        [three]
    );
    assert!(ids(&["--tag", "customer=nobody"]).is_empty());
    // The library's list filter, the same.
    let listed = env
        .client
        .list(ListFilter {
            tags: tags(&["env=prod"]),
            limit: 10,
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id.as_str(), one);
}

#[tokio::test]
async fn bad_tags_exit_2_naming_the_tag_and_write_nothing() {
    let env = TestEnv::new();
    let long_key = format!("{}=v", "k".repeat(65));
    let long_value = format!("k={}", "v".repeat(257));
    let many: Vec<String> = (0..17).map(|i| format!("k{i}=v")).collect();
    let mut cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["novalue".into()], "must be key=value"),
        (vec!["=v".into()], "the key must be 1-64"),
        (vec![long_key], "the key must be 1-64"),
        (vec!["-k=v".into()], "start with a letter or digit"),
        (vec!["k k=v".into()], "only letters, digits"),
        (vec!["k=".into()], "the value must be 1-256"),
        (vec![long_value], "the value must be 1-256"),
        (vec!["k=a\tb".into()], "control characters"),
        (vec!["k=a".into(), "k=b".into()], "given twice"),
    ];
    cases.push((many, "at most 16"));
    for (items, rule) in &cases {
        let mut args = vec![
            "enqueue".to_string(),
            "echo".into(),
            "--args".into(),
            ARGS.into(),
        ];
        for i in items {
            args.push(format!("--tag={i}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = toolq(&env.db, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{items:?}: {err}");
        assert!(
            err.contains("tag") && err.contains(rule),
            "{items:?}: {err}"
        );
    }
    // The filters check them too.
    let out = toolq(&env.db, &["runs", "--tag", "nokey"]);
    assert_eq!(out.status.code(), Some(2));
    let out = toolq(
        &env.db,
        &[
            "schedule",
            "add",
            "echo",
            "--args",
            ARGS,
            "--cron",
            "* * * * *",
            "--tag",
            "_x=1",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    // A file line's bad tags name the line; the library refuses a bad map.
    let file = env.dir.path().join("bad.jsonl");
    std::fs::write(
        &file,
        "{\"tool\": \"echo\", \"args\": {\"message\": \"x\"}, \"tags\": {\"bad key\": \"v\"}}\n",
    )
    .unwrap();
    let out = toolq(&env.db, &["enqueue", "--file", file.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map: Tags = serde_json::from_value(json!({"ok": "1", "bad key": "2"})).unwrap();
    let e = env
        .client
        .enqueue(EnqueueRequest::new("echo", json!({"message": "x"})).tags(map))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("bad key=2"), "{e}");
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
    assert_eq!(env.count("SELECT count(*) FROM run_tags"), 0);
    assert_eq!(env.count("SELECT count(*) FROM schedules"), 0);
}

#[tokio::test]
async fn a_schedule_copies_its_tags_to_every_run_it_fires() {
    let env = TestEnv::new();
    let req = toolq::ScheduleRequest::cron("echo", json!({"message": "x"}), "*/10 * * * *")
        .tags(tags(&["team=ops"]));
    let s = env.client.create_schedule(req).await.unwrap();
    assert_eq!(s.tags, tags(&["team=ops"]));
    for at in ["2026-11-01T12:10:00Z", "2026-11-01T12:20:00Z"] {
        env.clock.set(t(at));
        let fired = env.client.fire_due_schedules().await.unwrap();
        assert_eq!(fired.runs.len(), 1);
        env.drain().await;
    }
    let runs = env
        .client
        .list(ListFilter {
            tags: tags(&["team=ops"]),
            limit: 10,
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.schedule_id.as_ref() == Some(&s.id)));
    assert!(runs.iter().all(|r| r.traceparent.is_none()), "a new trace");
    // The CLI's schedule add takes --tag.
    let out = toolq(
        &env.db,
        &[
            "--json",
            "schedule",
            "add",
            "echo",
            "--args",
            ARGS,
            "--cron",
            "0 * * * *",
            "--tag",
            "team=web",
        ],
    );
    assert_eq!(json_out(&out)["tags"], json!({"team": "web"}));
}

#[tokio::test]
async fn spawn_background_tags_its_run_and_the_caller_keeps_its_own() {
    let env = TestEnv::new();
    let req = EnqueueRequest::new(
        "spawn_background",
        json!({"tool": "counter", "args": {"message": "x"}, "tags": {"origin": "agent"}}),
    )
    .tags(tags(&["caller=yes"]));
    let parent = env.client.enqueue(req).await.unwrap().run_id;
    env.drain().await;
    let children = env
        .client
        .list(ListFilter {
            tool: Some("counter".into()),
            limit: 10,
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].tags, tags(&["origin=agent"]), "not inherited");
    assert_eq!(
        env.client.get(&parent).await.unwrap().tags,
        tags(&["caller=yes"])
    );
    // Bad tags are the tool's error, and start nothing.
    let out = env
        .client
        .spawn_background(
            "agent",
            json!({"tool": "counter", "args": {}, "tags": {"k": ""}}),
        )
        .await;
    let toolq::ToolOutcome::ToolError(m) = out else {
        panic!("{out:?}")
    };
    assert!(m.contains("tag") && m.contains("1-256"), "{m}");
    assert_eq!(
        env.count("SELECT count(*) FROM runs WHERE tool = 'counter'"),
        1
    );
}

#[tokio::test]
async fn bulk_cancel_and_retry_filter_by_tag() {
    let env = TestEnv::new();
    let a1 = enqueue(&env, &["customer=acme", "env=prod"]).await;
    let a2 = enqueue(&env, &["customer=acme"]).await;
    let other = enqueue(&env, &["customer=globex"]).await;
    let filter = RunFilter {
        tags: tags(&["customer=acme"]),
        ..RunFilter::default()
    };
    assert!(!filter.is_empty(), "a tag narrows a bulk call");
    let r = env
        .client
        .cancel_where(&filter, BulkOptions::default())
        .await
        .unwrap();
    assert_eq!((r.matched, r.done), (2, 2));
    for (id, state) in [(&a1, "cancelled"), (&a2, "cancelled"), (&other, "queued")] {
        assert_eq!(env.client.get(id).await.unwrap().state.as_str(), state);
    }
    // The CLI: retry only the prod one.
    let out = toolq(&env.db, &["--json", "retry", "--tag", "env=prod"]);
    let v = json_out(&out);
    assert_eq!(v["done"], 1, "{v}");
    assert_eq!(env.client.get(&a1).await.unwrap().state.as_str(), "queued");
    assert_eq!(
        env.client.get(&a2).await.unwrap().state.as_str(),
        "cancelled"
    );
}

#[tokio::test]
async fn prune_removes_the_tag_rows_of_the_runs_it_deletes() {
    let env = TestEnv::new();
    enqueue(&env, &["customer=acme", "env=prod"]).await;
    enqueue(&env, &[]).await;
    env.drain().await;
    assert_eq!(env.count("SELECT count(*) FROM run_tags"), 2);
    env.clock.set(t("2026-12-01T12:00:00Z"));
    // One age for everything: the runs' unacknowledged messages do not keep them.
    let report = env
        .client
        .prune(PruneOptions {
            older_than: Some(std::time::Duration::from_secs(60)),
            dry_run: false,
        })
        .await
        .unwrap();
    assert!(!report.dry_run);
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
    assert_eq!(env.count("SELECT count(*) FROM run_tags"), 0);
}

#[test]
fn the_api_takes_tags_and_filters_by_them_and_the_dashboard_shows_them() {
    let api = crate::api::Api::new();
    let one = api.post(
        "/runs",
        &json!({"tool": "echo", "args": {"message": "x"}, "tags": {"customer": "acme", "env": "prod"}}),
    );
    assert_eq!(one.status, 201, "{one:?}");
    let one = one.body["id"].as_str().unwrap().to_string();
    let many = api.post(
        "/runs/many",
        &json!({"runs": [
            {"tool": "echo", "args": {"message": "y"}, "tags": {"customer": "acme"}},
            {"tool": "echo", "args": {"message": "z"}},
        ]}),
    );
    assert_eq!(many.status, 201, "{many:?}");
    let ids = |query: &str| -> Vec<String> {
        let a = api.get(&format!("/runs?{query}"));
        assert_eq!(a.status, 200, "{a:?}");
        a.body["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids("tag=customer%3Dacme").len(), 2);
    assert_eq!(
        ids("tag=customer=acme&tag=env=prod"),
        std::slice::from_ref(&one)
    );
    assert_eq!(
        ids("tag=customer=acme&tag=env=prod&state=queued&limit=5"),
        std::slice::from_ref(&one)
    );
    assert!(ids("tag=customer=globex").is_empty());
    // Each run's JSON carries its tags ({} when none) and traceparent.
    let all = api.get("/runs");
    for r in all.body["runs"].as_array().unwrap() {
        assert!(
            r["tags"].is_object() && r.get("traceparent").is_some(),
            "{r}"
        );
    }
    let got = api.get(&format!("/runs/{one}"));
    assert_eq!(
        got.body["tags"],
        json!({"customer": "acme", "env": "prod"}),
        "{got:?}"
    );

    // Bad tags: 400 naming the tag, nothing written.
    let bad = api.post(
        "/runs",
        &json!({"tool": "echo", "args": {"message": "x"}, "tags": {"bad key": "v"}}),
    );
    let p = bad.problem(400);
    assert!(p.to_string().contains("bad key=v"), "{p}");
    let bad = api.get("/runs?tag=novalue");
    assert!(bad.problem(400).to_string().contains("key=value"));
    assert_eq!(ids("limit=100").len(), 3);

    // A schedule made through the API keeps its tags for the runs it fires.
    let s = api.post(
        "/schedules",
        &json!({"tool": "echo", "args": {"message": "t"}, "cron": "0 * * * *", "tags": {"team": "ops"}}),
    );
    assert_eq!(s.status, 201, "{s:?}");
    assert_eq!(s.body["tags"], json!({"team": "ops"}));
    let bad = api.post(
        "/schedules",
        &json!({"tool": "echo", "args": {"message": "t"}, "cron": "0 * * * *", "tags": {"team": ""}}),
    );
    assert!(bad.problem(400).to_string().contains("1-256"));

    // The dashboard: the tag filter narrows the list, and each row shows its tags.
    let page = ureq::get(format!("{}/runs?tag=env%3Dprod", api.base))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(page.contains(&one), "the tagged run is listed");
    assert_eq!(page.matches("data-id=").count(), 1, "only it");
    assert!(
        page.contains(r#"<a class="tag" href="/runs?tag=customer%3Dacme">customer=acme</a>"#),
        "{page}"
    );
}
