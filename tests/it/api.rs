//! The HTTP API (`/api/v1`) over real HTTP: a real `toolq web` process on a real database
//! (SQLite here, Postgres in `tests/postgres`). This module holds the shared client ([`Api`])
//! and the tests of the API's frame: auth, errors, limits, the OpenAPI document. The routes'
//! own tests are in `api_*.rs`.

use serde_json::{Value, json};

use crate::support::Killed;
use crate::web::Site;

/// A `toolq web` process and a client for its API.
pub struct Api {
    pub site: Site,
    _web: Killed,
    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub base: String,
    /// Sent as `Authorization: Bearer` when set.
    pub token: Option<String>,
}

/// An answer: status, headers we look at, and the body as JSON (`Null` when empty or not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Value,
    pub text: String,
}

impl Api {
    /// A fresh site with `toolq web` on a free loopback port.
    pub fn new() -> Self {
        Self::start(Site::new(), &[])
    }

    /// `toolq web` with `flags` on `site`.
    pub fn start(site: Site, flags: &[&str]) -> Self {
        let (web, url) = site.web(flags);
        Api {
            site,
            _web: web,
            base: url,
            token: None,
        }
    }

    /// The same server, sending `token` from now on.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_string());
        self
    }

    /// The whole address of `path` (under `/api/v1`).
    pub fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    /// A request to `path` with `headers` (the token added) and an optional raw body.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Answer {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let url = self.url(path);
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = match body {
            Some(b) => agent.run(req.body(b.to_vec()).unwrap()),
            None => agent.run(req.body(()).unwrap()),
        };
        let mut resp = resp.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            content_type,
            body,
            text,
        }
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Answer {
        self.call("GET", path, &[], None)
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> Answer {
        let bytes = serde_json::to_vec(body).unwrap();
        self.call(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(&bytes),
        )
    }
}

impl Answer {
    /// Asserts a problem+json answer with `status`; returns its body.
    pub fn problem(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "expected {status}, got {self:?}");
        assert_eq!(self.content_type, "application/problem+json", "{self:?}");
        assert_eq!(self.body["status"], json!(status), "{self:?}");
        assert!(
            self.body["type"]
                .as_str()
                .unwrap()
                .starts_with("urn:toolq:problem:")
        );
        assert!(!self.body["detail"].as_str().unwrap().is_empty());
        &self.body
    }

    /// Asserts a 2xx JSON answer; returns its body.
    pub fn ok(&self) -> &Value {
        assert!(
            (200..300).contains(&self.status),
            "expected success, got {self:?}"
        );
        &self.body
    }
}

#[test]
fn tools_are_listed_and_an_unknown_one_is_a_404_naming_it() {
    let api = Api::new();
    let tools = api.get("/tools");
    let names: Vec<&str> = tools
        .ok()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"echo"), "{names:?}");
    let echo = api.get("/tools/echo");
    assert_eq!(echo.ok()["name"], "echo");
    let p = api.get("/tools/nope").problem(404).clone();
    assert_eq!(p["field"], "tool");
    assert_eq!(p["value"], "nope");
}

#[test]
fn unknown_routes_and_methods_are_problems() {
    let api = Api::new();
    let a = api.get("/nothing/here");
    assert!(a.text.contains("openapi.json"), "{}", a.text);
    let p = a.problem(404).clone();
    assert_eq!(p["instance"], "/api/v1/nothing/here");
    api.call("DELETE", "/tools", &[], None).problem(405);
}

#[test]
fn the_served_document_is_the_checked_in_one() {
    let api = Api::new();
    let served = api.get("/openapi.json");
    let checked_in: Value = serde_json::from_str(include_str!("../../docs/openapi.json")).unwrap();
    assert!(
        served.ok() == &checked_in,
        "run `cargo run -- openapi > docs/openapi.json`"
    );
    assert_eq!(served.body["openapi"], "3.1.0");
}

#[test]
fn a_token_is_needed_off_loopback_config_and_the_read_token_cannot_act() {
    let site = Site::with_config("\n[web]\ntoken = \"act-secret\"\nread_token = \"read-secret\"\n");
    let api = Api::start(site, &[]);
    let p = api.get("/tools").problem(401).clone();
    assert_eq!(p["field"], "Authorization");
    let wrong = api.with_token("nope");
    wrong.get("/tools").problem(401);
    let read = Api {
        token: Some("read-secret".into()),
        ..wrong
    };
    read.get("/tools").ok();
    let p = read.post("/tools", &json!({})).problem(403).clone();
    assert!(p["detail"].as_str().unwrap().contains("read token"), "{p}");
    let act = Api {
        token: Some("act-secret".into()),
        ..read
    };
    act.get("/tools").ok();
}

#[test]
fn a_post_from_another_origin_is_refused() {
    let api = Api::new();
    let a = api.call(
        "POST",
        "/tools",
        &[
            ("Origin", "http://evil.example"),
            ("Content-Type", "application/json"),
        ],
        Some(b"{}"),
    );
    let p = a.problem(403);
    assert!(
        p["detail"].as_str().unwrap().contains("evil.example"),
        "{p}"
    );
    let a = api.call(
        "POST",
        "/tools",
        &[
            ("Sec-Fetch-Site", "cross-site"),
            ("Content-Type", "text/plain"),
        ],
        Some(b"{}"),
    );
    a.problem(403);
}

#[test]
fn a_client_that_sends_a_10_mib_body_whole_still_reads_the_413() {
    let api = Api::new();
    let mut body = br#"{"tool":"echo","args":{"message":""#.to_vec();
    body.extend(std::iter::repeat_n(b'x', 10 << 20));
    body.extend_from_slice(br#""}}"#);
    let a = api.call(
        "POST",
        "/runs",
        &[("Content-Type", "application/json")],
        Some(&body),
    );
    let p = a.problem(413);
    assert!(p["detail"].as_str().unwrap().contains("limit"), "{p}");
    assert_eq!(api.site.db().count("SELECT count(*) FROM runs"), 0);
}
