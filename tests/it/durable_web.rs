//! Issue 35 on the dashboard: a waiting run's page (what it waits for, snoozes, steps,
//! events), the runs table's note, the run's JSON, and the Send event action (CSRF, bad
//! input, a second delivery, read-only).

use serde_json::Value;

use crate::durable_cli::waiting_run;
use crate::web::Site;

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into()
}

/// Status, `Location` header and body.
fn call(
    req: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> (u16, Option<String>, String) {
    let mut resp = req.unwrap();
    let location = resp
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .map(str::to_string);
    let status = resp.status().as_u16();
    (
        status,
        location,
        resp.body_mut().read_to_string().unwrap_or_default(),
    )
}

fn get(url: &str, json: bool) -> (u16, String) {
    let mut req = agent().get(url);
    if json {
        req = req.header("Accept", "application/json");
    }
    let (s, _, b) = call(req.call());
    (s, b)
}

fn post(url: &str, json: bool, form: &[(&str, &str)]) -> (u16, Option<String>, String) {
    let mut req = agent().post(url);
    if json {
        req = req.header("Accept", "application/json");
    }
    call(req.send_form(form.iter().copied()))
}

fn csrf(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("a form with csrf")
        + 19;
    html[at..].split('"').next().unwrap().to_string()
}

#[test]
fn a_waiting_run_s_page_shows_its_wait_steps_and_events_and_its_json_has_them() {
    let site = Site::new();
    let id = waiting_run(&site);
    let (_web, url) = site.web(&[]);
    let (status, html) = get(&format!("{url}/runs/{id}"), false);
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("Waiting: event &quot;go&quot; (no timeout)"),
        "{html}"
    );
    assert!(html.contains("Snoozes"), "{html}");
    for text in [
        "<h2>Steps</h2>",
        "fetch",
        "sleep#1",
        "connection reset by peer",
        "event:go",
        "<h2>Events</h2>",
        "sent before",
        "pending",
        "Send event",
        "action=\"/runs/",
    ] {
        assert!(html.contains(text), "{text}: {html}");
    }
    // The event the run waits for is filled in.
    assert!(
        html.contains("name=\"name\" placeholder=\"event name\" required value=\"go\""),
        "{html}"
    );
    // A long output is cut in the cell (its whole text in the title).
    assert!(html.contains("…</td>"), "{html}");

    let (_, json) = get(&format!("{url}/runs/{id}"), true);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["run"]["waiting"]["event"], "go");
    assert_eq!(v["run"]["snoozes"], 2);
    assert_eq!(v["steps"].as_array().unwrap().len(), 4);
    assert_eq!(v["steps"][2]["error"], "connection reset by peer");
    assert_eq!(v["events"][0]["sent_by"], "alice");

    let (_, runs) = get(&format!("{url}/runs"), false);
    assert!(runs.contains("waiting event go"), "{runs}");
}

#[test]
fn send_event_from_the_run_page_wakes_the_run_and_refuses_bad_input() {
    let site = Site::new();
    let id = waiting_run(&site);
    let (_web, url) = site.web(&[]);
    let (_, page) = get(&format!("{url}/runs/{id}"), false);
    let secret = csrf(&page);
    let action = format!("{url}/runs/{id}/signal");
    let stored = || site.db().count("SELECT count(*) FROM run_events");
    assert_eq!(stored(), 2);

    // Without the CSRF secret: refused, nothing stored.
    let (status, _, _) = post(&action, false, &[("csrf", "x"), ("name", "go")]);
    assert_eq!(status, 403);
    // Bad input: the error names it, nothing stored.
    let (status, _, body) = post(
        &action,
        false,
        &[("csrf", &secret), ("name", "go"), ("payload", "{bad")],
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("payload") && body.contains("not valid JSON"),
        "{body}"
    );
    let (status, _, body) = post(&action, true, &[("csrf", &secret), ("name", "")]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("event"), "{body}");
    assert_eq!(stored(), 2);

    // Sent: back to the run's page with a notice, and the run is due now.
    let (status, location, _) = post(
        &action,
        false,
        &[
            ("csrf", &secret),
            ("name", "go"),
            ("payload", r#"{"ok":1}"#),
        ],
    );
    assert_eq!(status, 303);
    let location = location.unwrap();
    assert!(
        location.starts_with(&format!("/runs/{id}?notice=")),
        "{location}"
    );
    let (_, page) = get(&format!("{url}{location}"), false);
    assert!(page.contains("resumes now"), "{page}");
    assert_eq!(stored(), 3);
    assert_eq!(
        site.db()
            .text(&format!(
                "SELECT sent_by FROM run_events WHERE run_id = '{id}' AND name = 'go'"
            ))
            .as_deref(),
        Some("web")
    );
    let show: Value = serde_json::from_slice(&site.toolq(&["--json", "show", &id]).stdout).unwrap();
    assert!(show["run_at"].as_str().unwrap() < "9999", "{show}");

    // A second delivery of the name: 409 naming the first; JSON answers like the CLI.
    let (status, _, body) = post(&action, true, &[("csrf", &secret), ("name", "go")]);
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("already sent") && body.contains("by web"),
        "{body}"
    );
    let (status, _, body) = post(&action, true, &[("csrf", &secret), ("name", "later")]);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["event", "run_id", "woke"]);
    assert_eq!(v["woke"], false);
}

#[test]
fn read_only_shows_the_journal_without_the_send_event_form() {
    let site = Site::new();
    let id = waiting_run(&site);
    let (_web, url) = site.web(&["--read-only"]);
    let (_, html) = get(&format!("{url}/runs/{id}"), false);
    assert!(
        html.contains("<h2>Steps</h2>") && html.contains("event:go"),
        "{html}"
    );
    assert!(!html.contains("Send event"), "{html}");
    let (status, _, _) = post(
        &format!("{url}/runs/{id}/signal"),
        false,
        &[("csrf", "x"), ("name", "go")],
    );
    assert_eq!(status, 403);
}
