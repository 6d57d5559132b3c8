//! http_request against a local server the test starts (std TcpListener in a thread).

use std::io::{Read, Write};
use std::net::TcpListener;

use serde_json::{Value, json};
use toolq::{EnqueueRequest, RunState};

use crate::support::TestEnv;

/// Serves `n` requests with `status` and `body`; each request's raw text is echoed in the
/// `x-request-len` header so tests can see the body arrived.
fn serve(
    n: usize,
    status: u16,
    body: &'static [u8],
) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/check", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for _ in 0..n {
            let (mut s, _) = l.accept().unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            // Read the head, then the body by Content-Length.
            loop {
                let k = s.read(&mut buf).unwrap();
                req.extend_from_slice(&buf[..k]);
                let text = String::from_utf8_lossy(&req).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if req.len() >= end + 4 + len || k == 0 {
                        break;
                    }
                }
                if k == 0 {
                    break;
                }
            }
            seen.push(String::from_utf8_lossy(&req).to_string());
            let head = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nX-Probe: yes\r\nConnection: close\r\n\r\n",
                body.len()
            );
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(body).unwrap();
        }
        seen
    });
    (url, h)
}

async fn run(env: &TestEnv, args: Value) -> toolq::Run {
    let mut req = EnqueueRequest::new("http_request", args);
    req.max_attempts = Some(1);
    let id = env.client.enqueue(req).await.unwrap().run_id;
    env.drain().await;
    env.client.get(&id).await.unwrap()
}

#[tokio::test]
async fn a_request_returns_status_headers_and_body() {
    let env = TestEnv::new();
    let (url, server) = serve(1, 200, b"all good");
    let run = run(
        &env,
        json!({"method": "POST", "url": url, "headers": {"X-Token": "t1"}, "body": "ping"}),
    )
    .await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.error);
    let v: Value =
        serde_json::from_slice(&env.client.result(&run).await.unwrap().unwrap().content).unwrap();
    let r = &v["result"];
    assert_eq!(r["status"], 200);
    assert_eq!(r["body"], "all good");
    assert_eq!(r["body_truncated"], false);
    assert_eq!(r["headers"]["x-probe"], "yes");
    assert!(r["elapsed_ms"].is_u64());
    let seen = server.join().unwrap();
    assert!(seen[0].starts_with("POST /check"), "{}", seen[0]);
    assert!(
        seen[0].to_ascii_lowercase().contains("x-token: t1"),
        "{}",
        seen[0]
    );
    assert!(seen[0].ends_with("ping"), "{}", seen[0]);
}

#[tokio::test]
async fn the_body_is_capped() {
    let env = TestEnv::new();
    let (url, server) = serve(1, 200, b"0123456789abcdef");
    let run = run(&env, json!({"url": url, "max_body_bytes": 4})).await;
    let v: Value =
        serde_json::from_slice(&env.client.result(&run).await.unwrap().unwrap().content).unwrap();
    assert_eq!(v["result"]["body"], "0123");
    assert_eq!(v["result"]["body_truncated"], true);
    server.join().unwrap();
}

#[tokio::test]
async fn an_unexpected_status_is_a_tool_error() {
    let env = TestEnv::new();
    let (url, server) = serve(2, 503, b"down for maintenance");
    let run1 = run(&env, json!({"url": url})).await;
    assert_eq!(run1.state, RunState::Failed);
    let e = run1.error.unwrap();
    assert!(
        e.contains("unexpected status 503") && e.contains("down for maintenance"),
        "{e}"
    );
    let run2 = run(&env, json!({"url": url, "expected_status": [200, 503]})).await;
    assert_eq!(run2.state, RunState::Completed, "{:?}", run2.error);
    server.join().unwrap();
}

#[tokio::test]
async fn a_connection_failure_names_the_cause() {
    let env = TestEnv::new();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run = run(&env, json!({"url": format!("http://127.0.0.1:{port}/")})).await;
    assert_eq!(run.state, RunState::Failed);
    let e = run.error.unwrap();
    assert!(
        e.contains(&port.to_string()) && e.to_lowercase().contains("connect"),
        "{e}"
    );
    let bad = env
        .client
        .enqueue(EnqueueRequest::new(
            "http_request",
            json!({"url": "ftp://x"}),
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(bad.contains("ftp://x"), "{bad}");
}
