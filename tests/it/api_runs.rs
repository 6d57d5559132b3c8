//! `/api/v1/runs` over real HTTP against a real `toolq web` and a real worker process:
//! enqueue (one and many), list pages, show, wait, the actions, signal, the log (a range and
//! a follow) and the result.

use std::io::{BufRead, BufReader};

use serde_json::{Value, json};

use crate::api::Api;
use crate::support::wait_until;

/// `GET path` answering bytes: status, the headers we look at, the body.
fn raw_get(
    api: &Api,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.get(api.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req.call().unwrap();
    let status = resp.status().as_u16();
    let heads = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = resp.body_mut().read_to_vec().unwrap();
    (status, heads, body)
}

fn header<'a>(heads: &'a [(String, String)], name: &str) -> &'a str {
    heads
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no header {name} in {heads:?}"))
}

/// Reads an event stream until `event: end` (or the stream closes): each event's name, id
/// and data.
fn read_events(
    api: &Api,
    path: &str,
    headers: &[(&str, &str)],
) -> Vec<(String, Option<String>, Value)> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(60)))
        .build()
        .into();
    let mut req = agent.get(api.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.call().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let reader = BufReader::new(resp.into_body().into_reader());
    let mut events = Vec::new();
    let (mut name, mut id, mut data) = (String::new(), None, String::new());
    for line in reader.lines() {
        let line = line.unwrap();
        if line.is_empty() {
            if !data.is_empty() {
                let v: Value = serde_json::from_str(&data).unwrap();
                let end = name == "end";
                events.push((std::mem::take(&mut name), id.take(), v));
                data.clear();
                if end {
                    break;
                }
            }
            continue;
        }
        if let Some(v) = line.strip_prefix("event:") {
            name = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("id:") {
            id = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    events
}

fn enqueue(api: &Api, body: Value) -> String {
    let a = api.post("/runs", &body);
    assert_eq!(a.status, 201, "{a:?}");
    a.body["id"].as_str().unwrap().to_string()
}

#[test]
fn a_run_is_enqueued_waited_for_and_its_result_and_log_read() {
    let api = Api::new();
    let spec = json!({"tool": "shell", "args": {"argv": ["sh", "-c", "echo hello; echo world"]},
        "session": "s1", "idempotency_key": "k1"});
    let first = api.post("/runs", &spec);
    assert_eq!(first.status, 201, "{first:?}");
    let id = first.body["id"].as_str().unwrap().to_string();
    assert_eq!(first.body["run_id"], json!(id));
    assert_eq!(first.body["created"], json!(true));
    assert_eq!(first.body["tool"], "shell");
    assert!(first.body["log_path"].as_str().unwrap().contains(&id));
    // The CLI answers the same object.
    let cli = api.site.toolq(&[
        "--json",
        "enqueue",
        "shell",
        "--args",
        r#"{"argv":["sh","-c","echo hello; echo world"]}"#,
        "--session",
        "s1",
        "--idempotency-key",
        "k1",
    ]);
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    let again = api.post("/runs", &spec);
    assert_eq!(
        again.status, 200,
        "an existing run is not created: {again:?}"
    );
    assert_eq!(again.body, cli);
    assert_eq!(again.body["created"], json!(false));
    assert_eq!(again.body["id"], json!(id));

    // Not ended yet: a short wait times out with ended false.
    let w = api.get(&format!("/runs/{id}/wait?timeout=200ms"));
    assert_eq!(w.ok()["ended"], json!(false));
    assert_eq!(w.body["state"], "queued");
    assert_eq!(w.body["run"]["id"], json!(id));

    let _worker = api.site.worker();
    let w = api.get(&format!("/runs/{id}/wait?timeout=60s"));
    assert_eq!(w.ok()["ended"], json!(true), "{w:?}");
    assert_eq!(w.body["state"], "completed");
    assert_eq!(w.body["error"], Value::Null);
    assert_eq!(w.body["run"]["state"], "completed");

    let r = api.get(&format!("/runs/{id}/result"));
    assert_eq!(r.content_type, "application/json");
    let cli = api.site.toolq(&["--json", "result", &id]);
    assert_eq!(
        r.ok(),
        &serde_json::from_slice::<Value>(&cli.stdout).unwrap()
    );

    let shown = api.get(&format!("/runs/{id}"));
    let cli = api.site.toolq(&["--json", "show", &id]);
    assert_eq!(
        shown.ok(),
        &serde_json::from_slice::<Value>(&cli.stdout).unwrap()
    );
    assert_eq!(shown.body["state"], "completed");
    assert!(shown.body["links"].is_object());

    let (status, heads, body) = raw_get(&api, &format!("/runs/{id}/log"), &[]);
    assert_eq!(status, 200);
    assert_eq!(body, b"[stdout] hello\n[stdout] world\n");
    assert_eq!(header(&heads, "x-log-size"), "30");
    assert_eq!(header(&heads, "x-run-state"), "completed");
    assert_eq!(header(&heads, "x-run-ended"), "true");
    assert!(header(&heads, "content-type").starts_with("text/plain"));
    let (_, _, body) = raw_get(&api, &format!("/runs/{id}/log?offset=16&length=6"), &[]);
    assert_eq!(body, b"stdout");
    let (status, heads, body) = raw_get(&api, &format!("/runs/{id}/log?offset=100"), &[]);
    assert_eq!((status, body.len()), (200, 0), "past the end is empty");
    assert_eq!(header(&heads, "x-log-size"), "30");
}

#[test]
fn a_log_is_followed_and_the_follow_resumes_from_its_last_event_id() {
    let api = Api::new();
    let id = enqueue(
        &api,
        json!({"tool": "shell", "args": {"argv": ["sh", "-c",
            "for i in 1 2 3 4 5; do echo line $i; sleep 0.2; done"]}}),
    );
    let _worker = api.site.worker();
    let events = read_events(&api, &format!("/runs/{id}/log/stream"), &[]);
    let (last, rest) = events.split_last().unwrap();
    assert_eq!(last.0, "end", "{events:?}");
    assert_eq!(last.2["state"], "completed");
    let text: String = rest
        .iter()
        .filter(|e| e.0 == "log")
        .map(|e| e.2["text"].as_str().unwrap())
        .collect();
    let want: String = (1..=5).map(|i| format!("[stdout] line {i}\n")).collect();
    assert_eq!(text, want);
    assert_eq!(last.2["size"], json!(want.len()));
    // Each event's id is the offset after it.
    for e in rest.iter().filter(|e| e.0 == "log") {
        let off = e.2["offset"].as_u64().unwrap() as usize;
        let end: usize = e.1.as_deref().unwrap().parse().unwrap();
        assert_eq!(end, off + e.2["text"].as_str().unwrap().len());
    }
    // Resumed after the first line: the rest only, then the end.
    let after = "[stdout] line 1\n".len();
    let events = read_events(
        &api,
        &format!("/runs/{id}/log/stream"),
        &[("Last-Event-ID", &after.to_string())],
    );
    let text: String = events
        .iter()
        .filter(|e| e.0 == "log")
        .map(|e| e.2["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, &want[after..]);
    assert_eq!(events.last().unwrap().0, "end");
    let events = read_events(
        &api,
        &format!("/runs/{id}/log/stream?offset={}", want.len()),
        &[],
    );
    assert_eq!(events.len(), 1, "{events:?}");
}

#[test]
fn many_runs_are_enqueued_at_once_and_listed_in_pages() {
    let api = Api::new();
    let runs: Vec<Value> = (0..5)
        .map(|i| {
            json!({"tool": "echo", "args": {"message": format!("m{i}")}, "session": "pages",
            "ref": format!("r{i}")})
        })
        .chain([
            json!({"tool": "echo", "args": {"message": "last"}, "session": "pages",
            "after": ["r0", "r4"]}),
        ])
        .collect();
    let a = api.post("/runs/many", &json!({"runs": runs}));
    assert_eq!(a.status, 201, "{a:?}");
    assert_eq!(a.body["enqueued"], 6);
    assert_eq!(a.body["created"], 6);
    let ids: Vec<String> = a.body["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(a.body["runs"][5]["id"], json!(ids[5]));
    let last = api.get(&format!("/runs/{}", ids[5]));
    let parents: Vec<&str> = last.ok()["links"]["parents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["parent"].as_str().unwrap())
        .collect();
    assert_eq!(parents.len(), 2, "{parents:?}");
    assert!(parents.contains(&ids[0].as_str()) && parents.contains(&ids[4].as_str()));
    api.site.enqueue(&[
        "echo",
        "--args",
        r#"{"message":"other"}"#,
        "--session",
        "other",
    ]);

    let mut seen = Vec::new();
    let mut path = "/runs?session=pages&limit=4".to_string();
    loop {
        let page = api.get(&path);
        let body = page.ok().clone();
        for r in body["runs"].as_array().unwrap() {
            assert_eq!(r["session_id"], "pages");
            seen.push(r["id"].as_str().unwrap().to_string());
        }
        match body["next"].as_str() {
            Some(next) => path = format!("/runs?session=pages&limit=4&cursor={next}"),
            None => break,
        }
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);
    let blocked = api.get("/runs?state=queued&tool=echo&limit=100");
    assert_eq!(blocked.ok()["runs"].as_array().unwrap().len(), 7);
    assert_eq!(blocked.body["next"], Value::Null);
    let none = api.get(&format!("/runs?parent={}", ids[0]));
    assert_eq!(none.ok()["runs"], json!([]));
    let both = api.get("/runs?state=completed,failed");
    assert_eq!(both.ok()["runs"], json!([]));
}

#[test]
fn cancel_retry_approve_and_deny_answer_as_the_cli() {
    let api = Api::new();
    let id = enqueue(&api, json!({"tool": "echo", "args": {"message": "x"}}));
    let c = api.call("POST", &format!("/runs/{id}/cancel"), &[], None);
    assert_eq!(
        c.ok(),
        &json!({"id": id, "run_id": id, "state": "cancelled", "cancel_requested": false})
    );
    let again = api.call("POST", &format!("/runs/{id}/cancel"), &[], None);
    assert!(
        again.problem(409)["detail"]
            .as_str()
            .unwrap()
            .contains("already cancelled")
    );
    let r = api.call("POST", &format!("/runs/{id}/retry"), &[], None);
    assert_eq!(r.ok(), &json!({"id": id, "run_id": id, "state": "queued"}));
    api.call("POST", &format!("/runs/{id}/retry"), &[], None)
        .problem(409);

    // `add` needs approval on this site.
    let yes = enqueue(&api, json!({"tool": "add", "args": {"a": 1, "b": 2}}));
    let no = enqueue(&api, json!({"tool": "add", "args": {"a": 3, "b": 4}}));
    assert_eq!(
        api.get(&format!("/runs/{yes}")).ok()["state"],
        "awaiting_approval"
    );
    let a = api.post(&format!("/runs/{yes}/approve"), &json!({"note": "fine"}));
    assert_eq!(a.ok()["state"], "queued");
    assert_eq!(a.body["approval_state"], "approved");
    assert_eq!(a.body["approval_by"], "api");
    assert_eq!(a.body["approval_note"], "fine");
    api.call("POST", &format!("/runs/{yes}/approve"), &[], None)
        .problem(409);
    // An empty body is `{}`.
    let d = api.call("POST", &format!("/runs/{no}/deny"), &[], None);
    assert_eq!(d.ok()["state"], "cancelled");
    assert_eq!(d.body["approval_state"], "denied");
    assert_eq!(d.body["approval_by"], "api");
    let _worker = api.site.worker();
    let w = api.get(&format!("/runs/{yes}/wait?timeout=60s"));
    assert_eq!(w.ok()["state"], "completed", "{w:?}");
    assert_eq!(
        api.get(&format!("/runs/{yes}/result")).ok()["result"],
        json!({"result": 3})
    );
    let denied = api.get(&format!("/runs/{no}/result"));
    assert_eq!(denied.ok()["status"], "cancelled");
    let later = enqueue(
        &api,
        json!({"tool": "echo", "args": {"message": "x"}, "in": "1h"}),
    );
    let none = api.get(&format!("/runs/{later}/result"));
    assert!(
        none.problem(409)["detail"]
            .as_str()
            .unwrap()
            .contains("no result yet")
    );
}

#[test]
fn a_waiting_run_resumes_on_a_signal() {
    let api = Api::new();
    let id = enqueue(
        &api,
        json!({"tool": "await_event", "args": {"event": "go", "timeout": "1h"}}),
    );
    let _worker = api.site.worker();
    wait_until("the run waits for its event", || {
        api.get(&format!("/runs/{id}")).body["waiting"]["event"] == "go"
    });
    let bad = api.post(&format!("/runs/{id}/signal"), &json!({"name": ""}));
    assert_eq!(bad.problem(400)["field"], "name");
    let s = api.post(
        &format!("/runs/{id}/signal"),
        &json!({"name": "go", "payload": {"x": 1}}),
    );
    assert_eq!(s.ok(), &json!({"run_id": id, "event": "go", "woke": true}));
    let w = api.get(&format!("/runs/{id}/wait?timeout=60s"));
    assert_eq!(w.ok()["state"], "completed", "{w:?}");
    let result = api.get(&format!("/runs/{id}/result"));
    assert!(result.ok().to_string().contains("\"x\":1"), "{result:?}");
    let shown = api.get(&format!("/runs/{id}"));
    assert_eq!(shown.ok()["events"][0]["sent_by"], "api");
    let late = api.post(&format!("/runs/{id}/signal"), &json!({"name": "go"}));
    late.problem(409);
}

#[test]
fn the_runs_a_run_spawned_are_listed_by_parent() {
    let api = Api::new();
    let parent = enqueue(
        &api,
        json!({"tool": "spawn_background", "args": {"tool": "sleep", "args": {"ms": 10}}}),
    );
    enqueue(
        &api,
        json!({"tool": "echo", "args": {"message": "not a child"}}),
    );
    let _worker = api.site.worker();
    let w = api.get(&format!("/runs/{parent}/wait?timeout=60s"));
    assert_eq!(w.ok()["state"], "completed", "{w:?}");
    let kids = api.get(&format!("/runs?parent={parent}"));
    let kids = kids.ok()["runs"].as_array().unwrap().clone();
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(kids[0]["parent_run_id"], json!(parent));
    assert_eq!(kids[0]["tool"], "sleep");
    let shown = api.get(&format!("/runs/{parent}"));
    assert_eq!(shown.ok()["links"]["children"][0]["id"], kids[0]["id"]);
}
