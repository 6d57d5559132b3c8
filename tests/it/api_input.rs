//! Bad input to `/api/v1/runs`: each refusal is a problem naming the field and value, and
//! nothing is written (no row in `runs`).

use serde_json::json;

use crate::api::{Answer, Api};

/// Runs in the database.
fn runs(api: &Api) -> i64 {
    api.site.db().count("SELECT count(*) FROM runs")
}

fn post_raw(api: &Api, path: &str, content_type: &str, body: &[u8]) -> Answer {
    api.call("POST", path, &[("Content-Type", content_type)], Some(body))
}

#[test]
fn malformed_json_is_a_400_and_writes_nothing() {
    let api = Api::new();
    let p = post_raw(
        &api,
        "/runs",
        "application/json",
        br#"{"tool": "echo", "args": "#,
    )
    .problem(400)
    .clone();
    assert_eq!(p["type"], "urn:toolq:problem:invalid-body");
    assert!(
        p["detail"].as_str().unwrap().contains("not valid JSON"),
        "{p}"
    );
    post_raw(&api, "/runs/many", "application/json", b"{runs: []}").problem(400);
    assert_eq!(runs(&api), 0);
}

#[test]
fn a_wrong_type_names_the_field() {
    let api = Api::new();
    let p = api
        .post(
            "/runs",
            &json!({"tool": "echo", "args": {"message": "x"}, "priority": "high"}),
        )
        .problem(400)
        .clone();
    assert_eq!(p["field"], "priority", "{p}");
    let p = api
        .post(
            "/runs/many",
            &json!({"runs": [{"tool": "echo", "args": {"message": "x"}},
            {"tool": "echo", "max_attempts": "3"}]}),
        )
        .problem(400)
        .clone();
    assert_eq!(p["field"], "runs[1].max_attempts", "{p}");
    let p = api
        .post("/runs/x/signal", &json!({"name": 5}))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "name", "{p}");
    assert_eq!(runs(&api), 0);
}

#[test]
fn a_missing_field_is_named_with_its_path() {
    let api = Api::new();
    let p = api.post("/runs", &json!({"args": {}})).problem(400).clone();
    assert_eq!(p["field"], "tool", "{p}");
    let p = api
        .post(
            "/runs/many",
            &json!({"runs": [{"tool": "echo"}, {"args": {}}]}),
        )
        .problem(400)
        .clone();
    assert_eq!(p["field"], "runs[1].tool", "{p}");
    let p = api
        .post("/batches", &json!({"title": "t"}))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "runs", "{p}");
    assert_eq!(runs(&api), 0);
}

#[test]
fn an_unknown_field_is_named() {
    let api = Api::new();
    let p = api
        .post(
            "/runs",
            &json!({"tool": "echo", "args": {"message": "x"}, "colour": "red"}),
        )
        .problem(400)
        .clone();
    assert!(p["detail"].as_str().unwrap().contains("colour"), "{p}");
    let p = api
        .post(
            "/runs/many",
            &json!({"runs": [{"tool": "echo", "args": {"message": "x"}}], "batch": true}),
        )
        .problem(400)
        .clone();
    assert!(p["detail"].as_str().unwrap().contains("batch"), "{p}");
    let p = api.get("/runs?colour=red").problem(400).clone();
    assert!(p["detail"].as_str().unwrap().contains("colour"), "{p}");
    assert_eq!(runs(&api), 0);
}

/// POSTs `body` to `path` over a plain socket, writing it on another thread while the
/// answer is read (the server answers 413 without reading a body over its limit, then closes;
/// an HTTP client that insists on writing all of it first would fail with a broken pipe).
/// `expect` sends `Expect: 100-continue`, as curl does for large bodies. Returns the
/// answer's status and body.
fn post_big(api: &Api, path: &str, body: Vec<u8>, expect: bool) -> (u16, serde_json::Value) {
    use std::io::{Read, Write};
    let addr = api.base.trim_start_matches("http://").to_string();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    let head = format!(
        "POST /api/v1{path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{}Connection: close\r\n\r\n",
        body.len(),
        if expect {
            "Expect: 100-continue\r\n"
        } else {
            ""
        }
    );
    conn.write_all(head.as_bytes()).unwrap();
    let writer = (!expect).then(|| {
        let mut w = conn.try_clone().unwrap();
        std::thread::spawn(move || {
            // Refused midway: the error is the point.
            let _ = w.write_all(&body);
        })
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, rest)) = text.split_once("\r\n\r\n")
            && let Some(len) = head.lines().find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().to_string())
            })
            && rest.len() >= len.parse::<usize>().unwrap()
        {
            break;
        }
    }
    drop(conn);
    if let Some(w) = writer {
        w.join().unwrap();
    }
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or_default();
    (status, json)
}

#[test]
fn a_10_mib_body_is_a_413() {
    let api = Api::new();
    let big = format!(
        r#"{{"tool": "echo", "args": {{"message": "{}"}}}}"#,
        "x".repeat(10 << 20)
    );
    for expect in [true, false] {
        let (status, p) = post_big(&api, "/runs", big.clone().into_bytes(), expect);
        assert_eq!(status, 413, "{p}");
        assert_eq!(p["type"], "urn:toolq:problem:body-too-large");
    }
    let runs_body = format!(r#"{{"runs": [{big}]}}"#);
    let (status, _) = post_big(&api, "/runs/many", runs_body.into_bytes(), true);
    assert_eq!(status, 413);
    assert_eq!(runs(&api), 0);
}

#[test]
fn a_body_that_is_not_json_is_a_415() {
    let api = Api::new();
    let a = post_raw(
        &api,
        "/runs",
        "text/plain",
        br#"{"tool": "echo", "args": {"message": "x"}}"#,
    );
    assert!(
        a.problem(415)["detail"]
            .as_str()
            .unwrap()
            .contains("text/plain")
    );
    let a = api.call("POST", "/runs", &[], Some(br#"{"tool": "echo"}"#));
    a.problem(415);
    assert_eq!(runs(&api), 0);
}

#[test]
fn path_traversal_in_an_id_is_a_400_naming_the_run_id() {
    let api = Api::new();
    for path in [
        "/runs/..%2F..%2Fetc%2Fpasswd",
        "/runs/%2e%2e%2ftools/result",
        "/runs/bg_..%2F..%2Fx/log",
    ] {
        let p = api.get(path).problem(400).clone();
        assert_eq!(p["field"], "run id", "{path}: {p}");
        assert!(p["value"].as_str().unwrap().contains(".."), "{path}: {p}");
    }
    let p = api
        .call("POST", "/runs/..%2F..%2Fx/cancel", &[], None)
        .problem(400)
        .clone();
    assert_eq!(p["value"], "../../x");
    assert_eq!(runs(&api), 0);
}

#[test]
fn an_id_of_the_wrong_kind_is_a_400_and_an_unknown_run_a_404() {
    let api = Api::new();
    let sch = format!("sch_{}", "0".repeat(32));
    let p = api.get(&format!("/runs/{sch}")).problem(400).clone();
    assert_eq!(p["field"], "run id");
    assert_eq!(p["value"], json!(sch));
    let p = api
        .post(&format!("/runs/{sch}/approve"), &json!({}))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "run id");
    let p = api.get(&format!("/runs?cursor={sch}")).problem(400).clone();
    assert_eq!(p["field"], "cursor");
    let p = api.get(&format!("/runs?parent={sch}")).problem(400).clone();
    assert_eq!(p["field"], "parent");
    let p = api
        .post(
            "/runs",
            &json!({"tool": "echo", "args": {"message": "x"}, "after": [sch]}),
        )
        .problem(400)
        .clone();
    assert_eq!(p["field"], "after");
    let unknown = format!("bg_{}", "0".repeat(32));
    api.get(&format!("/runs/{unknown}")).problem(404);
    api.get(&format!("/runs/{unknown}/wait?timeout=1s"))
        .problem(404);
    api.call("POST", &format!("/runs/{unknown}/cancel"), &[], None)
        .problem(404);
    let p = api
        .post(
            "/runs",
            &json!({"tool": "echo", "args": {"message": "x"}, "after": [unknown]}),
        )
        .problem(400)
        .clone();
    assert_eq!(p["field"], "after", "{p}");
    assert_eq!(runs(&api), 0);
}

#[test]
fn a_bad_tool_or_bad_args_are_named() {
    let api = Api::new();
    let p = api
        .post("/runs", &json!({"tool": "nope"}))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "tool", "{p}");
    assert_eq!(p["value"], "nope");
    let p = api
        .post("/runs", &json!({"tool": "echo", "args": {"message": 5}}))
        .problem(400)
        .clone();
    assert!(p["field"].as_str().unwrap().starts_with("args"), "{p}");
    let p = api
        .post(
            "/runs",
            &json!({"tool": "echo", "args": {"message": "x"}, "timeout": "soon"}),
        )
        .problem(400)
        .clone();
    assert_eq!(
        (p["field"].as_str(), p["value"].as_str()),
        (Some("timeout"), Some("soon"))
    );
    // In a batch, the failing run is named; the good ones before it are not written.
    let p = api
        .post(
            "/runs/many",
            &json!({"runs": [{"tool": "echo", "args": {"message": "x"}},
            {"tool": "echo", "args": {"message": "y"}}, {"tool": "nope"}]}),
        )
        .problem(400)
        .clone();
    assert!(p["field"].as_str().unwrap().starts_with("runs[2]"), "{p}");
    let p = api
        .post(
            "/runs/many",
            &json!({"runs": [{"tool": "echo", "args": {"message": "x"}, "after": ["ghost"]}]}),
        )
        .problem(400)
        .clone();
    assert_eq!(p["field"], "runs[0]: after", "{p}");
    let p = api
        .post(
            "/runs/many",
            &json!({"runs": [
            {"tool": "echo", "args": {"message": "x"}, "ref": "a", "after": ["b"]},
            {"tool": "echo", "args": {"message": "y"}, "ref": "b", "after": ["a"]}]}),
        )
        .problem(400)
        .clone();
    assert_eq!(p["field"], "runs: after", "{p}");
    let p = api
        .post("/runs/many", &json!({"runs": []}))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "runs");
    let p = api
        .post(
            "/runs",
            &json!({"tool": "echo", "args": {"message": "x"}, "ref": "a"}),
        )
        .problem(400)
        .clone();
    assert_eq!(p["field"], "ref");
    let p = api.get("/runs?state=sleeping").problem(400).clone();
    assert_eq!(
        (p["field"].as_str(), p["value"].as_str()),
        (Some("state"), Some("sleeping"))
    );
    let p = api.get("/runs?limit=0").problem(400).clone();
    assert_eq!(p["field"], "limit");
    let id = api.site.enqueue(&["echo", "--args", r#"{"message":"x"}"#]);
    let before = runs(&api);
    let p = api
        .get(&format!("/runs/{id}/wait?timeout=1h"))
        .problem(400)
        .clone();
    assert_eq!(p["field"], "timeout");
    let p = api
        .post(
            &format!("/runs/{id}/signal"),
            &json!({"name": "go", "by": "me"}),
        )
        .problem(400)
        .clone();
    assert!(p["detail"].as_str().unwrap().contains("by"), "{p}");
    assert_eq!(runs(&api), before);
    assert_eq!(api.site.db().count("SELECT count(*) FROM run_events"), 0);
}
