//! The dashboard over plain HTTP: a real `toolq web` process on a real database. Security
//! (loopback default, token, CSRF, Origin, read-only), JSON via Accept, and the routes.
//! The browser tests (tests/it/browser.rs) drive the same process through Chromium.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use tempfile::TempDir;

use crate::support::{ENGINE, Engine, Killed, TestDb};

/// A database with a config (shell tool on, `add` needs approval, fast worker loop), and
/// helpers to start `toolq web` and a worker on it.
pub struct Site {
    pub dir: TempDir,
    db: TestDb,
}

impl Site {
    pub fn new() -> Self {
        Self::with_config("")
    }

    /// A site whose config file also has `extra` (TOML) at its end.
    pub fn with_config(extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("toolq.toml"),
            String::from(
                "[shell]\nenabled = true\n\n[approvals]\nrequire = [\"add\"]\n\n\
             [worker]\npoll_interval = \"100ms\"\nheartbeat_interval = \"200ms\"\n\
             flush_interval = \"100ms\"\ncancel_grace = \"200ms\"\nshutdown_grace = \"1s\"\n\n\
             [schedules]\nlate_after = \"60s\"\n",
            ) + extra,
        )
        .unwrap();
        let db = TestDb::at(dir.path());
        let site = Site { dir, db };
        let out = site.toolq(&["init"]);
        assert!(out.status.success(), "init: {out:?}");
        site
    }

    /// The database: a file on SQLite, a URL on Postgres (pass it as `--db`).
    pub fn db(&self) -> &TestDb {
        &self.db
    }

    fn command(&self) -> Command {
        let mut cmd = crate::support::toolq_command();
        cmd.arg("--db")
            .arg(self.db())
            .arg("--config")
            .arg(self.dir.path().join("toolq.toml"));
        cmd
    }

    /// Runs a `toolq` command to its end.
    pub fn toolq(&self, args: &[&str]) -> std::process::Output {
        self.command().args(args).output().unwrap()
    }

    /// Enqueues and returns the run id.
    pub fn enqueue(&self, args: &[&str]) -> String {
        let out = self.toolq(&[&["enqueue"], args].concat());
        assert!(out.status.success(), "enqueue {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Starts `toolq web` on a free loopback port with `extra` flags; returns it and its URL.
    pub fn web(&self, extra: &[&str]) -> (Killed, String) {
        let mut child = self
            .command()
            .args(["web", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("dashboard at ")
            .unwrap_or_else(|| panic!("toolq web printed {line:?}"))
            .trim_end_matches('/')
            .to_string();
        (Killed(child), url)
    }

    /// Starts a worker.
    pub fn worker(&self) -> Killed {
        Killed(
            self.command()
                .arg("worker")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    /// A run's state as `toolq show --json` reports it.
    pub fn state(&self, id: &str) -> String {
        let out = self.toolq(&["--json", "show", id]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["state"].as_str().unwrap().to_string()
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into()
}

fn get(url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = agent().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req.call().unwrap();
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

fn post(url: &str, headers: &[(&str, &str)], form: &[(&str, &str)]) -> (u16, String) {
    let mut req = agent().post(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req.send_form(form.iter().copied()).unwrap();
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

/// The CSRF secret a page's forms carry.
fn csrf(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("a form with csrf")
        + 19;
    html[at..].split('"').next().unwrap().to_string()
}

#[test]
fn web_every_route_answers_html_and_the_same_data_as_json() {
    let site = Site::new();
    let id = site.enqueue(&["echo", "--args", r#"{"message":"hi"}"#, "--session", "s1"]);
    let sched = site.toolq(&[
        "--json",
        "schedule",
        "add",
        "echo",
        "--args",
        r#"{"message":"tick"}"#,
        "--cron",
        "0 9 * * *",
        "--tz",
        "Europe/Berlin",
    ]);
    let sched: serde_json::Value = serde_json::from_slice(&sched.stdout).unwrap();
    let sid = sched["id"].as_str().unwrap().to_string();
    let (_web, url) = site.web(&[]);
    for path in [
        "/".to_string(),
        "/runs".into(),
        format!("/runs/{id}"),
        "/schedules".into(),
        format!("/schedules/{sid}"),
        "/approvals".into(),
        "/sessions/s1".into(),
        "/workers".into(),
    ] {
        let (status, html) = get(&format!("{url}{path}"), &[]);
        assert_eq!(status, 200, "{path}: {html}");
        assert!(html.starts_with("<!DOCTYPE html>"), "{path}");
        let (status, json) = get(&format!("{url}{path}"), &[("Accept", "application/json")]);
        assert_eq!(status, 200, "{path}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(v.is_object(), "{path}: {json}");
    }
    let (_, json) = get(
        &format!("{url}/runs/{id}"),
        &[("Accept", "application/json")],
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["run"]["id"], id.as_str());
    assert_eq!(v["run"]["state"], "queued");
    let (_, json) = get(&format!("{url}/"), &[("Accept", "application/json")]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["by_state"]["queued"], 1);
    assert_eq!(v["last_hour"]["buckets"].as_array().unwrap().len(), 60);
    // The WAL row is of SQLite's -wal file; a Postgres server keeps its own, so that engine
    // shows none (not a size of 0 B that looks measured).
    let (_, html) = get(&format!("{url}/"), &[]);
    let sqlite = crate::support::ENGINE == crate::support::Engine::Sqlite;
    assert_eq!(v["engine"], if sqlite { "sqlite" } else { "postgres" });
    assert_eq!(html.contains("WAL size"), sqlite, "{html}");
    let (status, _) = get(&format!("{url}/runs/bg_nope"), &[]);
    assert_eq!(status, 400);
    let (status, _) = get(&format!("{url}/no/such/page"), &[]);
    assert_eq!(status, 404);
    let (status, _) = post(&format!("{url}/runs/{id}/explode"), &[], &[("csrf", "x")]);
    assert_eq!(status, 404, "an action that does not exist is no page");
}

#[test]
fn web_actions_need_the_csrf_secret_and_a_matching_origin() {
    let site = Site::new();
    let id = site.enqueue(&["echo", "--args", r#"{"message":"hi"}"#]);
    let (_web, url) = site.web(&[]);
    let (_, page) = get(&format!("{url}/runs/{id}"), &[]);
    let secret = csrf(&page);
    let (status, _) = post(
        &format!("{url}/runs/{id}/cancel"),
        &[],
        &[("csrf", "wrong")],
    );
    assert_eq!(status, 403);
    let (status, _) = post(
        &format!("{url}/runs/{id}/cancel"),
        &[("Origin", "http://evil.example")],
        &[("csrf", &secret)],
    );
    assert_eq!(status, 403);
    assert_eq!(site.state(&id), "queued", "refused posts changed nothing");
    let host = url.trim_start_matches("http://").to_string();
    let (status, _) = post(
        &format!("{url}/runs/{id}/cancel"),
        &[("Origin", &format!("http://{host}"))],
        &[("csrf", &secret)],
    );
    assert_eq!(status, 303);
    assert_eq!(site.state(&id), "cancelled");
    // DNS rebinding: a page from another name that resolves here gets nothing.
    let (status, _) = get(&format!("{url}/"), &[("Host", "evil.example")]);
    assert_eq!(status, 421);
}

#[test]
fn web_read_only_hides_and_refuses_every_action() {
    let site = Site::new();
    let id = site.enqueue(&["echo", "--args", r#"{"message":"hi"}"#]);
    let (_web, url) = site.web(&["--read-only"]);
    let (_, page) = get(&format!("{url}/runs/{id}"), &[]);
    assert!(!page.contains("<form method=\"post\""), "{page}");
    assert!(!page.contains("name=\"csrf\""));
    assert!(page.contains("read-only"));
    let (_, runs) = get(&format!("{url}/runs"), &[]);
    assert!(!runs.contains("/runs/bulk"));
    let (status, _) = post(&format!("{url}/runs/{id}/cancel"), &[], &[("csrf", "x")]);
    assert_eq!(status, 403);
    assert_eq!(site.state(&id), "queued");
}

#[test]
fn web_read_token_sees_every_page_but_no_action() {
    let site = Site::new();
    let id = site.enqueue(&["echo", "--args", r#"{"message":"hi"}"#]);
    let (_web, url) = site.web(&["--token", "act", "--read-token", "look"]);
    let read = [("Authorization", "Bearer look")];
    let (status, page) = get(&format!("{url}/runs/{id}"), &read);
    assert_eq!(status, 200, "{page}");
    assert!(!page.contains("name=\"csrf\""), "{page}");
    assert!(page.contains("read-only"));
    let (status, body) = post(&format!("{url}/runs/{id}/cancel"), &read, &[("csrf", "x")]);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("read token"), "{body}");
    assert_eq!(site.state(&id), "queued");
    // The acting token still sees the actions.
    let (_, page) = get(
        &format!("{url}/runs/{id}"),
        &[("Authorization", "Bearer act")],
    );
    assert!(page.contains("name=\"csrf\""));
    // The two tokens must differ.
    let out = site.toolq(&[
        "web",
        "--listen",
        "127.0.0.1:0",
        "--token",
        "same",
        "--read-token",
        "same",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("web.read_token"));
}

#[test]
fn web_with_a_token_refuses_requests_without_it() {
    let site = Site::new();
    let (_web, url) = site.web(&["--token", "s3cret"]);
    let (status, body) = get(&format!("{url}/"), &[]);
    assert_eq!(status, 401, "{body}");
    let (status, _) = get(&format!("{url}/"), &[("Authorization", "Bearer wrong")]);
    assert_eq!(status, 401);
    let (status, _) = get(&format!("{url}/"), &[("Authorization", "Bearer s3cret")]);
    assert_eq!(status, 200);
    // ?token= sets the cookie once and drops the token from the address.
    let resp = agent()
        .get(&format!("{url}/runs?token=s3cret"))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("toolq_token=s3cret;"), "{cookie}");
    assert!(cookie.contains("HttpOnly"));
    assert_eq!(resp.headers()["location"], "/runs");
    // ... keeping the page's other parameters, and never leaving this server.
    let location = |path: &str| {
        let resp = agent().get(&format!("{url}{path}")).call().unwrap();
        assert_eq!(resp.status().as_u16(), 303, "{path}");
        resp.headers()["location"].to_str().unwrap().to_string()
    };
    assert_eq!(
        location("/runs?state=failed&token=s3cret&tool=echo"),
        "/runs?state=failed&tool=echo"
    );
    assert_eq!(location("//evil.example/?token=s3cret"), "/evil.example/");
    let (status, _) = get(&format!("{url}/runs"), &[("Cookie", "toolq_token=s3cret")]);
    assert_eq!(status, 200);
}

#[test]
fn an_unreadable_query_or_form_is_bad_input_in_the_page_s_own_format() {
    let site = Site::new();
    let (_web, url) = site.web(&[]);
    let json = [("Accept", "application/json")];
    for path in ["/sessions/s1?before=abc", "/runs?state=failed&state=queued"] {
        let (status, body) = get(&format!("{url}{path}"), &json);
        assert_eq!(status, 400, "{path}: {body}");
        let v: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert!(
            v["error"].as_str().unwrap().starts_with("query: "),
            "{path}: {v}"
        );
        let (status, html) = get(&format!("{url}{path}"), &[]);
        assert_eq!(status, 400, "{path}");
        assert!(html.starts_with("<!DOCTYPE html>"), "{path}: {html}");
    }
    // A bulk form without its action.
    let (status, body) = post(&format!("{url}/runs/bulk"), &json, &[("state", "failed")]);
    assert_eq!(status, 400, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["error"].as_str().unwrap().starts_with("form: "), "{v}");
}

/// Issue 40 item 8: refusals, a GET on an action and a missing page answer in the page's
/// format like every other error; a bulk action without a filter needs an explicit `all`.
#[test]
fn web_refusals_answer_in_the_page_s_format_and_bulk_needs_an_explicit_all() {
    let site = Site::new();
    let id = site.enqueue(&["echo", "--args", r#"{"message":"hi"}"#]);
    let (_web, url) = site.web(&[]);
    let (_ro, ro_url) = site.web(&["--read-only"]);
    let json = [("Accept", "application/json")];
    let error_of = |body: &str| -> String {
        let v: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
        v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"))
            .to_string()
    };
    // A stale CSRF field, another origin, a read-only dashboard: 403 as JSON or a page.
    let cancel = format!("{url}/runs/{id}/cancel");
    let origin = [
        ("Accept", "application/json"),
        ("Origin", "http://evil.example"),
    ];
    for (what, target, headers) in [
        ("csrf", cancel.clone(), &json[..]),
        ("origin", cancel.clone(), &origin[..]),
        ("read-only", format!("{ro_url}/runs/{id}/cancel"), &json[..]),
    ] {
        let (status, body) = post(&target, headers, &[("csrf", "stale")]);
        assert_eq!(status, 403, "{what}: {body}");
        assert!(!error_of(&body).is_empty(), "{what}");
        let html_headers: Vec<(&str, &str)> = headers
            .iter()
            .copied()
            .filter(|(k, _)| *k != "Accept")
            .collect();
        let (status, html) = post(&target, &html_headers, &[("csrf", "stale")]);
        assert_eq!(status, 403, "{what}");
        assert!(html.starts_with("<!DOCTYPE html>"), "{what}: {html}");
    }
    assert_eq!(site.state(&id), "queued", "refused posts changed nothing");
    // GET on an action: 405 with a body and the Allow header.
    for accept in [&json[..], &[]] {
        let mut resp = agent()
            .get(&format!("{url}/runs/bulk"))
            .header("Accept", accept.first().map_or("text/html", |(_, v)| *v))
            .call()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 405);
        assert_eq!(resp.headers()["allow"], "POST");
        let body = resp.body_mut().read_to_string().unwrap();
        if accept.is_empty() {
            assert!(body.starts_with("<!DOCTYPE html>"), "{body}");
            assert!(body.contains("answers POST only"), "{body}");
        } else {
            assert!(error_of(&body).contains("/runs/bulk"), "{body}");
        }
    }
    // A missing page names its path.
    let (status, body) = get(&format!("{url}/no/such/page"), &json);
    assert_eq!(status, 404);
    assert_eq!(error_of(&body), "page /no/such/page not found");
    // A bulk action with no filter matches everything only with all=true, which the runs
    // page's own form sends when no filter is set.
    let (_, page) = get(&format!("{url}/runs"), &[]);
    assert!(
        page.contains(r#"<input type="hidden" name="all" value="true">"#),
        "{page}"
    );
    let secret = csrf(&page);
    let form = [
        ("csrf", secret.as_str()),
        ("action", "cancel"),
        ("confirm", "yes"),
    ];
    let (status, body) = post(&format!("{url}/runs/bulk"), &json, &form);
    assert_eq!(status, 400, "{body}");
    let e = error_of(&body);
    assert!(e.contains("all=true") && e.contains("filter"), "{e}");
    assert_eq!(site.state(&id), "queued");
    let (_, page) = get(&format!("{url}/runs?state=queued"), &[]);
    assert!(
        !page.contains(r#"name="all""#),
        "a filtered form is not all"
    );
    let mut all = form.to_vec();
    all.push(("all", "true"));
    let (status, body) = post(&format!("{url}/runs/bulk"), &json, &all);
    assert_eq!(status, 200, "{body}");
    assert_eq!(site.state(&id), "cancelled");
}

/// Issue 40 item 9: a bulk action, an action on one run and a pause answer one shape in the
/// CLI and on the dashboard, old field names kept; times have milliseconds.
#[test]
fn the_cli_and_the_dashboard_answer_actions_in_one_shape() {
    let site = Site::new();
    let json = [("Accept", "application/json")];
    let cli = |args: &[&str]| -> serde_json::Value {
        let out = site.toolq(&[&["--json"], args].concat());
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let failed = |n: usize| -> Vec<String> {
        let ids: Vec<String> = (0..n)
            .map(|_| {
                site.enqueue(&[
                    "shell",
                    "--args",
                    r#"{"argv":["false"]}"#,
                    "--max-attempts",
                    "1",
                    "--session",
                    "one-shape",
                ])
            })
            .collect();
        let out = site.toolq(&["worker", "--drain"]);
        assert!(out.status.success(), "{out:?}");
        ids
    };
    let ids = failed(2);
    let (_web, url) = site.web(&[]);
    let (_, page) = get(&format!("{url}/runs"), &[]);
    let secret = csrf(&page);

    // Bulk retry: the same dry run in both places, then the retry itself in the CLI.
    let by_cli = cli(&["retry", "--session", "one-shape", "--dry-run"]);
    let (status, body) = post(
        &format!("{url}/runs/bulk"),
        &json,
        &[
            ("csrf", &secret),
            ("action", "retry"),
            ("session", "one-shape"),
        ],
    );
    assert_eq!(status, 200, "{body}");
    let by_web: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(keys(&by_cli), keys(&by_web), "{by_cli} / {by_web}");
    assert_eq!(by_web["action"], "retry");
    assert_eq!(by_web["matched"], 2);
    let by_cli = cli(&["retry", "--session", "one-shape"]);
    assert_eq!(by_cli["done"], 2, "{by_cli}");
    assert_eq!(by_cli["retried"], 2, "the old name stays: {by_cli}");
    // Bulk cancel of the queued runs on the web, then a cancel that finds nothing in the CLI.
    let (status, body) = post(
        &format!("{url}/runs/bulk"),
        &json,
        &[
            ("csrf", &secret),
            ("action", "cancel"),
            ("session", "one-shape"),
            ("confirm", "yes"),
        ],
    );
    assert_eq!(status, 200, "{body}");
    let by_web: serde_json::Value = serde_json::from_str(&body).unwrap();
    let by_cli = cli(&["cancel", "--session", "one-shape"]);
    assert_eq!(keys(&by_cli), keys(&by_web), "{by_cli} / {by_web}");
    assert_eq!(
        (by_web["done"].clone(), by_web["cancelled"].clone()),
        (2.into(), 2.into())
    );

    // One run: retry and cancel answer {id, run_id, state, ...} in both places.
    let (status, body) = post(
        &format!("{url}/runs/{}/retry", ids[0]),
        &json,
        &[("csrf", &secret)],
    );
    assert_eq!(status, 200, "{body}");
    let by_web: serde_json::Value = serde_json::from_str(&body).unwrap();
    let by_cli = cli(&["retry", &ids[1]]);
    assert_eq!(keys(&by_cli), keys(&by_web), "{by_cli} / {by_web}");
    assert_eq!(by_web["run_id"], ids[0].as_str());
    assert_eq!(by_web["state"], "queued");
    let (status, body) = post(
        &format!("{url}/runs/{}/cancel", ids[0]),
        &json,
        &[("csrf", &secret)],
    );
    assert_eq!(status, 200, "{body}");
    let by_web: serde_json::Value = serde_json::from_str(&body).unwrap();
    let by_cli = cli(&["cancel", &ids[1]]);
    assert_eq!(keys(&by_cli), keys(&by_web), "{by_cli} / {by_web}");
    assert_eq!(by_web["cancel_requested"], false);

    // A new pause's time has milliseconds, like every other time.
    let v = cli(&["pause", "--tool", "echo"]);
    let since = v["pause"]["since"].as_str().unwrap();
    let frac = since
        .rsplit_once('.')
        .map_or("", |(_, f)| f.trim_end_matches('Z'));
    assert!(frac.len() <= 3, "{since}");
    let again = cli(&["pause", "--tool", "echo"]);
    assert_eq!(again["pause"]["since"], v["pause"]["since"]);
}

#[test]
fn every_answer_forbids_framing_and_type_sniffing() {
    let site = Site::new();
    let (_web, url) = site.web(&[]);
    for path in ["/", "/runs", "/no-such-page", "/assets/app.css"] {
        let resp = agent().get(&format!("{url}{path}")).call().unwrap();
        let h = resp.headers();
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        assert!(
            h["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'"),
            "{path}"
        );
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
    }
}

#[test]
fn web_refuses_a_public_address_without_a_token() {
    let site = Site::new();
    let out = site.toolq(&["web", "--listen", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("toolq: "), "{err}");
    assert!(err.contains("--token"), "{err}");
    assert!(site.db().has_schema());
}

#[test]
fn web_bulk_retry_confirms_with_the_count_first() {
    let site = Site::new();
    let ids: Vec<String> = (0..3)
        .map(|_| {
            site.enqueue(&[
                "shell",
                "--args",
                r#"{"argv":["false"]}"#,
                "--max-attempts",
                "1",
            ])
        })
        .collect();
    let out = site.toolq(&["worker", "--drain"]);
    assert!(out.status.success(), "{out:?}");
    assert!(ids.iter().all(|id| site.state(id) == "failed"));
    let (_web, url) = site.web(&[]);
    let (_, page) = get(&format!("{url}/runs?state=failed"), &[]);
    let secret = csrf(&page);
    let form = [
        ("csrf", secret.as_str()),
        ("action", "retry"),
        ("state", "failed"),
    ];
    let (status, confirm) = post(&format!("{url}/runs/bulk"), &[], &form);
    assert_eq!(status, 200);
    assert!(
        confirm.contains("<span id=\"bulk-count\">3</span>"),
        "{confirm}"
    );
    assert!(
        ids.iter().all(|id| site.state(id) == "failed"),
        "asking wrote nothing"
    );
    let mut confirmed = form.to_vec();
    confirmed.push(("confirm", "yes"));
    let (status, _) = post(&format!("{url}/runs/bulk"), &[], &confirmed);
    assert_eq!(status, 303);
    assert!(ids.iter().all(|id| site.state(id) == "queued"));
}

#[test]
fn web_reads_only_while_nobody_acts() {
    let site = Site::new();
    let id = site.enqueue(&["echo", "--args", r#"{"message":"hi"}"#, "--session", "s1"]);
    let (_web, url) = site.web(&[]);
    let writes = WriteMarker::new(site.db());
    for _ in 0..5 {
        for path in [
            "/",
            "/runs",
            &format!("/runs/{id}"),
            "/schedules",
            "/approvals",
            "/sessions/s1",
            "/workers",
        ] {
            let (status, _) = get(&format!("{url}{path}"), &[]);
            assert_eq!(status, 200, "{path}");
        }
    }
    // The overview refreshes its figures in the background: still reads only.
    let (status, _) = get(&format!("{url}/"), &[]);
    assert_eq!(status, 200);
    assert_eq!(writes.since(), 0, "the dashboard committed a write");
    // An action does write (and the same check sees it).
    let (_, page) = get(&format!("{url}/runs/{id}"), &[]);
    let (status, _) = post(
        &format!("{url}/runs/{id}/cancel"),
        &[],
        &[("csrf", &csrf(&page))],
    );
    assert_eq!(status, 303);
    assert_ne!(writes.since(), 0);
}

/// Tells whether anything committed a write since it was made. SQLite: the file's
/// `data_version`, which moves only when another connection commits. Postgres: rows of this
/// database stamped with a transaction id at or past the first one not yet assigned when the
/// marker was made (other tests' databases share the server, so its counters would not do).
struct WriteMarker<'a> {
    db: &'a TestDb,
    sqlite: Option<(rusqlite::Connection, i64)>,
    next_xid: i64,
}

impl<'a> WriteMarker<'a> {
    fn new(db: &'a TestDb) -> Self {
        match ENGINE {
            Engine::Sqlite => {
                let conn = rusqlite::Connection::open(db.file()).unwrap();
                let v = Self::data_version(&conn);
                WriteMarker {
                    db,
                    sqlite: Some((conn, v)),
                    next_xid: 0,
                }
            }
            Engine::Postgres => WriteMarker {
                db,
                sqlite: None,
                next_xid: db.count("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"),
            },
        }
    }

    fn data_version(c: &rusqlite::Connection) -> i64 {
        c.query_row("PRAGMA data_version", [], |r| r.get(0))
            .unwrap()
    }

    /// 0 when nothing was written since [`WriteMarker::new`]; else how much.
    fn since(&self) -> i64 {
        if let Some((conn, before)) = &self.sqlite {
            return Self::data_version(conn) - before;
        }
        self.db
            .column("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            .iter()
            .map(|t| {
                self.db.count(&format!(
                    "SELECT count(*) FROM \"{t}\" WHERE xmin::text::bigint >= {}",
                    self.next_xid
                ))
            })
            .sum()
    }
}

#[test]
fn web_config_keys_set_read_only_and_the_token() {
    let site = Site::with_config("\n[web]\nread_only = true\ntoken = \"from-config\"\n");
    let id = site.enqueue(&["echo", "--args", r#"{"message":"hi"}"#]);
    let (_web, url) = site.web(&[]);
    let (status, _) = get(&format!("{url}/runs/{id}"), &[]);
    assert_eq!(status, 401);
    let auth = [("Authorization", "Bearer from-config")];
    let (status, page) = get(&format!("{url}/runs/{id}"), &auth);
    assert_eq!(status, 200);
    assert!(!page.contains("name=\"csrf\""), "read-only shows no form");
    let (status, _) = post(&format!("{url}/runs/{id}/cancel"), &auth, &[]);
    assert_eq!(status, 403);
    assert_eq!(site.state(&id), "queued");
    let shown = site.toolq(&["config"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("web.token") && !shown.contains("from-config"),
        "{shown}"
    );
    let bad = Site::new();
    let cfg = bad.dir.path().join("toolq.toml");
    let text = std::fs::read_to_string(&cfg).unwrap() + "\n[web]\nlisten = \"nowhere\"\n";
    std::fs::write(&cfg, text).unwrap();
    let out = bad.toolq(&["web"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("web.listen"),
        "{out:?}"
    );
}

#[test]
fn web_beside_a_worker() {
    let site = Site::new();
    let mut child = site
        .command()
        .args(["worker", "--web", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _worker = Killed(child);
    let mut url = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if let Some(at) = line.find("serving the dashboard at http://") {
            let rest = &line[at + "serving the dashboard at ".len()..];
            url = Some(
                rest.split_whitespace()
                    .next()
                    .unwrap()
                    .trim_end_matches('/')
                    .to_string(),
            );
            break;
        }
    }
    let url = url.expect("the worker logs the dashboard address");
    let id = site.enqueue(&["echo", "--args", r#"{"message":"hi"}"#]);
    crate::support::wait_until("the run completes", || site.state(&id) == "completed");
    let (status, json) = get(&format!("{url}/workers"), &[("Accept", "application/json")]);
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["workers"][0]["liveness"], "alive", "{json}");
}

/// Keyset pages (the dashboard's `Client::runs_page`) visit every matching run once, newest
/// first, through the key walk and through a session's index, also when runs share their
/// creation time (the manual clock stands still).
#[tokio::test]
async fn runs_pages_visit_every_run_once_newest_first() {
    let env = crate::support::TestEnv::new();
    let reqs: Vec<toolq::EnqueueRequest> = (0..150)
        .map(|i| {
            toolq::EnqueueRequest::new("echo", serde_json::json!({"message": i.to_string()}))
                .session(if i % 5 == 0 { "b" } else { "a" })
        })
        .collect();
    env.client.enqueue_batch(reqs).await.unwrap();
    for (session, expected) in [(None, 150), (Some("a"), 120), (Some("b"), 30)] {
        let filter = toolq::run::RunFilter {
            session: session.map(String::from),
            ..Default::default()
        };
        let mut seen: Vec<String> = Vec::new();
        let mut before: Option<toolq::RunId> = None;
        loop {
            let page = env
                .client
                .runs_page(&filter, before.as_ref(), 50)
                .await
                .unwrap();
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= 50);
            before = page.last().map(|r| r.id.clone());
            seen.extend(page.iter().map(|r| r.id.to_string()));
        }
        assert_eq!(seen.len(), expected, "{session:?}");
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.reverse();
        sorted.dedup();
        assert_eq!(seen, sorted, "{session:?}: newest first, each once");
    }
    let e = env
        .client
        .runs_page(&Default::default(), None, 0)
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2);
}

/// The overview's chart counts: each final state in the bucket its finish falls in, on the
/// library call the dashboard makes (both engines).
#[tokio::test]
async fn finished_buckets_count_each_final_state_in_its_bucket() {
    use crate::support::TestEnv;
    use toolq::{Clock, EnqueueRequest};
    let env = TestEnv::new();
    for i in 0..3 {
        let req = EnqueueRequest::new("echo", serde_json::json!({"message": format!("m{i}")}));
        env.client.enqueue(req).await.unwrap();
    }
    env.drain().await;
    let queued = env
        .client
        .enqueue(EnqueueRequest::new(
            "echo",
            serde_json::json!({"message": "x"}),
        ))
        .await
        .unwrap()
        .run_id;
    env.client.cancel(&queued).await.unwrap();
    let now = env.clock.now();
    // Bucket 30 of a minute each holds `now`; nothing finished before `since` counts.
    let since = now - chrono::Duration::seconds(30 * 60 + 10);
    let mut rows = env.client.finished_buckets(since, 60).await.unwrap();
    rows.sort_by(|a, b| a.state.cmp(&b.state));
    let got: Vec<(String, i64, i64)> = rows
        .into_iter()
        .map(|b| (b.state, b.bucket, b.count))
        .collect();
    assert_eq!(
        got,
        vec![("cancelled".into(), 30, 1), ("completed".into(), 30, 3)]
    );
    let later = env
        .client
        .finished_buckets(now + chrono::Duration::seconds(1), 60)
        .await;
    assert!(later.unwrap().is_empty());
}
