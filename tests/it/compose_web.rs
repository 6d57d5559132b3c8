//! Issue 36 on the dashboard: the batches list and a batch's page (progress, counts by state
//! with blocked runs apart, first failures, callback, its runs), their JSON, the batch's
//! cancel and retry actions (CSRF, read-only), a run's links, the runs list's batch filter,
//! and bad batch ids (400 naming it, 404, never a panic).

use chrono::Utc;
use serde_json::{Value, json};
use toolq::core::{BatchRequest, OnComplete};
use toolq::{Client, EnqueueRequest, RegistryBuilder, RunId};

use crate::web::Site;

/// A batch in every state, and a completed one with its callback run, on `site`'s database.
pub struct Mixed {
    /// "nightly import": 2 completed, 1 failed, 1 cancelled (its parent failed), 1 queued
    /// (due in an hour), 1 blocked (waits for the queued one).
    pub batch: String,
    /// Its runs in request order: `[a, b, fail, after-fail, later, after-later]`.
    pub runs: Vec<String>,
    /// A run spawned by `runs[0]` (not in the batch).
    pub child: String,
    /// "small": one run, completed, with its callback run.
    pub done: String,
    /// The callback run of `done`.
    pub callback: String,
}

fn echo(msg: &str) -> EnqueueRequest {
    EnqueueRequest::new("echo", json!({ "message": msg }))
}

fn client(site: &Site) -> Client {
    let registry = RegistryBuilder::new().with_builtins().build().unwrap();
    Client::open(site.db().config(), registry).unwrap()
}

/// Creates the batches and drains what is due with a `toolq worker --drain` process.
pub async fn mixed(site: &Site) -> Mixed {
    let c = client(site);
    let fail = EnqueueRequest {
        max_attempts: Some(1),
        ..EnqueueRequest::new("divide", json!({"a": 1, "b": 0}))
    };
    let after_fail = EnqueueRequest {
        after_requests: vec![2],
        ..echo("after the failure")
    };
    let later = EnqueueRequest {
        run_at: Some(Utc::now() + chrono::Duration::hours(1)),
        title: Some("Later".into()),
        ..echo("later")
    };
    let after_later = EnqueueRequest {
        after_requests: vec![4],
        title: Some("After later".into()),
        ..echo("after later")
    };
    let created = c
        .create_batch(
            BatchRequest {
                session: "ops".into(),
                title: Some("nightly import".into()),
                on_complete: Some(OnComplete {
                    tool: "echo".into(),
                    args: json!({"message": "imported"}),
                }),
            },
            vec![echo("a"), echo("b"), fail, after_fail, later, after_later],
        )
        .await
        .unwrap();
    let runs: Vec<String> = created.runs.iter().map(|r| r.run_id.to_string()).collect();
    let spawner: RunId = runs[0].parse().unwrap();
    let child = c
        .enqueue(EnqueueRequest {
            parent: Some(spawner),
            title: Some("Spawned child".into()),
            ..echo("child")
        })
        .await
        .unwrap()
        .run_id
        .to_string();
    let small = c
        .create_batch(
            BatchRequest {
                session: "ops".into(),
                title: Some("small".into()),
                on_complete: Some(OnComplete {
                    tool: "echo".into(),
                    args: json!({"message": "done"}),
                }),
            },
            vec![echo("only")],
        )
        .await
        .unwrap();
    // A worker (not `--drain`: a drain also waits for the blocked run, whose parent is
    // not due for an hour) until every due run has ended.
    let worker = site.worker();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (b, done) = loop {
        let b = c.batch(&created.batch_id).await.unwrap();
        let done = c.batch(&small.batch_id).await.unwrap();
        let callback_done = match &done.callback_run_id {
            Some(id) => c.get(&id.parse().unwrap()).await.unwrap().state.is_final(),
            None => false,
        };
        let child_done = c
            .get(&child.parse().unwrap())
            .await
            .unwrap()
            .state
            .is_final();
        if b.pending == 2 && done.is_complete() && callback_done && child_done {
            break (b, done);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the due runs did not end: {b:?} {done:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    drop(worker);
    assert_eq!(
        (b.completed, b.failed, b.cancelled, b.pending),
        (2, 1, 1, 2),
        "{b:?}"
    );
    Mixed {
        batch: created.batch_id.to_string(),
        runs,
        child,
        done: small.batch_id.to_string(),
        callback: done.callback_run_id.clone().expect("a callback run"),
    }
}

/// Builds the fixture from a test that is not async.
fn mixed_now(site: &Site) -> Mixed {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(mixed(site))
}

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

fn get_json(url: &str) -> Value {
    let (status, body) = get(url, true);
    assert_eq!(status, 200, "{url}: {body}");
    serde_json::from_str(&body).unwrap()
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
fn a_batch_page_shows_its_progress_counts_failures_and_runs_and_its_json_is_the_batch() {
    let site = Site::new();
    let m = mixed_now(&site);
    let (_web, url) = site.web(&[]);
    let (status, html) = get(&format!("{url}/batches/{}", m.batch), false);
    assert_eq!(status, 200, "{html}");
    for text in [
        "nightly import",
        "href=\"/sessions/ops\"",
        // 4 of 6 final.
        "67%",
        "4 of 6 final",
        "2 completed",
        "1 failed",
        "1 cancelled",
        "2 pending",
        "s-blocked",
        "waiting for their parents",
        "<h2>First failures</h2>",
        "Cancel 2 unfinished runs",
        "Retry 2 failed or cancelled runs",
        "enqueued when every run is final",
        "href=\"/batches\"",
    ] {
        assert!(html.contains(text), "{text}: {html}");
    }
    // The first failure links to its run; the list shows every run of the batch.
    assert!(
        html.contains(&format!("href=\"/runs/{}\"", m.runs[2])),
        "{html}"
    );
    for id in &m.runs {
        assert!(html.contains(&format!("data-id=\"{id}\"")), "{id}: {html}");
    }
    assert!(!html.contains(&m.child), "the spawned child is not in it");
    // The blocked run's note in the table.
    assert!(html.contains("blocked by its parents"), "{html}");

    // JSON: the batch's own fields, named as `Batch` serializes them, then its runs.
    let v = get_json(&format!("{url}/batches/{}", m.batch));
    let lib = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let b = client(&site)
            .batch(&m.batch.parse().unwrap())
            .await
            .unwrap();
        serde_json::to_value(b).unwrap()
    });
    for (k, want) in lib.as_object().unwrap() {
        assert_eq!(&v[k], want, "field {k}");
    }
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.retain(|k| lib.get(k).is_none());
    keys.sort();
    assert_eq!(keys, ["next_before", "runs"]);
    assert_eq!(v["states"]["blocked"], 1);
    assert_eq!(v["states"]["queued"], 1);
    assert_eq!(v["states"]["completed"], 2);
    assert_eq!(v["first_failures"][0]["id"], m.runs[2].as_str());
    assert_eq!(v["runs"].as_array().unwrap().len(), 6);
    // Newest first.
    assert_eq!(v["runs"][0]["id"], m.runs[5].as_str());
}

#[test]
fn a_completed_batch_links_its_callback_and_the_list_shows_and_filters_batches() {
    let site = Site::new();
    let m = mixed_now(&site);
    let (_web, url) = site.web(&[]);
    let (status, html) = get(&format!("{url}/batches/{}", m.done), false);
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains(&format!("href=\"/runs/{}\"", m.callback)),
        "{html}"
    );
    assert!(
        html.contains("100%") && html.contains("1 of 1 final"),
        "{html}"
    );
    // Nothing to cancel or retry.
    assert!(!html.contains("unfinished runs"), "{html}");
    assert!(!html.contains("failed or cancelled runs"), "{html}");
    let v = get_json(&format!("{url}/batches/{}", m.done));
    assert_eq!(v["state"], "completed");
    assert_eq!(v["completions"], 1);
    assert_eq!(v["callback_run_id"], m.callback.as_str());
    assert!(v["completed_at"].is_string(), "{v}");

    let (status, html) = get(&format!("{url}/batches"), false);
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("nightly import") && html.contains(">small<"),
        "{html}"
    );
    assert!(
        html.contains(&format!("href=\"/batches/{}\"", m.batch)),
        "{html}"
    );
    assert!(html.contains("class=\"on\">Batches"), "{html}");
    let v = get_json(&format!("{url}/batches"));
    let ids: Vec<&str> = v["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [m.done.as_str(), m.batch.as_str()], "newest first");
    assert_eq!(v["batches"][1]["pending"], 2);
    assert!(v["next_before"].is_null());
    let v = get_json(&format!("{url}/batches?state=completed"));
    assert_eq!(v["batches"].as_array().unwrap().len(), 1);
    assert_eq!(v["batches"][0]["id"], m.done.as_str());
    let v = get_json(&format!("{url}/batches?session=nobody"));
    assert!(v["batches"].as_array().unwrap().is_empty());
    let (status, body) = get(&format!("{url}/batches?state=done"), true);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("state") && body.contains("running or completed"),
        "{body}"
    );
    let (status, body) = get(&format!("{url}/batches?before=x"), true);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("batch id"), "{body}");

    // The runs list filters by batch, and its form keeps the filter.
    let (status, html) = get(&format!("{url}/runs?batch={}", m.batch), false);
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains(&format!("name=\"batch\" value=\"{}\"", m.batch)),
        "{html}"
    );
    assert!(html.contains("id=\"batchlink\""), "{html}");
    let v = get_json(&format!("{url}/runs?batch={}", m.batch));
    assert_eq!(v["runs"].as_array().unwrap().len(), 6);
    let v = get_json(&format!("{url}/runs?batch={}&state=failed", m.batch));
    assert_eq!(v["runs"].as_array().unwrap().len(), 1);
    let (status, body) = get(&format!("{url}/runs?batch=bt_nope"), true);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("batch id") && body.contains("bt_nope"),
        "{body}"
    );
}

#[test]
fn a_run_page_shows_its_links_and_a_blocked_run_says_so() {
    let site = Site::new();
    let m = mixed_now(&site);
    let (_web, url) = site.web(&[]);

    // The blocked run: its batch, its parent (not ended, queued), the note.
    let (status, html) = get(&format!("{url}/runs/{}", m.runs[5]), false);
    assert_eq!(status, 200, "{html}");
    for text in [
        "<h2>Links</h2>",
        "Blocked by its parents: 1 of 1 not ended yet",
        "when its parents complete",
        "not ended",
        "after (must complete)",
    ] {
        assert!(html.contains(text), "{text}: {html}");
    }
    assert!(
        html.contains(&format!("href=\"/batches/{}\"", m.batch)),
        "{html}"
    );
    assert!(
        html.contains(&format!("href=\"/runs/{}\"", m.runs[4])),
        "{html}"
    );
    let v = get_json(&format!("{url}/runs/{}", m.runs[5]));
    assert_eq!(v["links"]["batch_id"], m.batch.as_str());
    assert_eq!(v["links"]["parents"][0]["parent"], m.runs[4].as_str());
    assert_eq!(v["links"]["parents"][0]["mode"], "all");
    assert_eq!(v["linked_states"][&m.runs[4]], "queued");
    assert_eq!(v["run"]["waiting"]["kind"], "parents");

    // The queued parent lists its blocked dependent.
    let (_, html) = get(&format!("{url}/runs/{}", m.runs[4]), false);
    assert!(html.contains("Waited for by (1)"), "{html}");
    assert!(html.contains("s-blocked"), "{html}");
    // The cancelled dependent: its parent resolved failed.
    let v = get_json(&format!("{url}/runs/{}", m.runs[3]));
    assert_eq!(v["links"]["parents"][0]["resolved"], "failed");
    assert_eq!(v["run"]["state"], "cancelled");

    // The spawning run and its child link to each other.
    let (_, html) = get(&format!("{url}/runs/{}", m.runs[0]), false);
    assert!(html.contains("Spawned (1)"), "{html}");
    assert!(
        html.contains(&format!("href=\"/runs/{}\"", m.child)),
        "{html}"
    );
    let (_, html) = get(&format!("{url}/runs/{}", m.child), false);
    assert!(html.contains("Spawned by"), "{html}");
    assert!(
        html.contains(&format!("href=\"/runs/{}\"", m.runs[0])),
        "{html}"
    );

    // The callback's parent is its batch.
    let (_, html) = get(&format!("{url}/runs/{}", m.callback), false);
    assert!(html.contains("callback of the batch"), "{html}");
    assert!(
        html.contains(&format!("href=\"/batches/{}\"", m.done)),
        "{html}"
    );

    // A run without links has no Links section; its JSON has empty links.
    let plain = site.enqueue(&["echo", "--args", r#"{"message":"alone"}"#]);
    let (_, html) = get(&format!("{url}/runs/{plain}"), false);
    assert!(!html.contains("<h2>Links</h2>"), "{html}");
    let v = get_json(&format!("{url}/runs/{plain}"));
    assert_eq!(
        v["links"],
        json!({"parents": [], "dependents": [], "children": []})
    );
}

#[test]
fn bad_batch_ids_are_400_naming_them_unknown_ones_404() {
    let site = Site::new();
    let (_web, url) = site.web(&[]);
    for json in [false, true] {
        let (status, body) = get(&format!("{url}/batches/nope"), json);
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("batch id") && body.contains("nope"), "{body}");
        let unknown = format!("bt_{}", "0".repeat(32));
        let (status, body) = get(&format!("{url}/batches/{unknown}"), json);
        assert_eq!(status, 404, "{body}");
        assert!(body.contains(&unknown), "{body}");
        for path in [
            "/batches/..%2F..%2Fetc%2Fpasswd",
            "/batches/%2e%2e",
            "/batches/bt_%00",
            "/batches/../../etc/passwd",
            "/batches/bt_x/y/z",
        ] {
            let (status, body) = get(&format!("{url}{path}"), json);
            assert!(status == 400 || status == 404, "{path}: {status} {body}");
        }
    }
    // The actions too: a bad id after the CSRF check, an unknown action 404.
    let (_, page) = get(&format!("{url}/runs"), false);
    let secret = csrf(&page);
    let (status, _, body) = post(
        &format!("{url}/batches/nope/cancel"),
        true,
        &[("csrf", &secret)],
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("batch id"), "{body}");
    let unknown = format!("bt_{}", "0".repeat(32));
    let (status, _, body) = post(
        &format!("{url}/batches/{unknown}/retry"),
        true,
        &[("csrf", &secret)],
    );
    assert_eq!(status, 404, "{body}");
    let (status, _, body) = post(
        &format!("{url}/batches/{unknown}/explode"),
        true,
        &[("csrf", &secret)],
    );
    assert_eq!(status, 404, "{body}");
    // The server is still answering.
    let (status, _) = get(&format!("{url}/batches"), false);
    assert_eq!(status, 200);
}

#[test]
fn batch_cancel_and_retry_act_on_its_runs_with_csrf_and_read_only_hides_them() {
    let site = Site::new();
    let m = mixed_now(&site);
    {
        let (_ro, url) = site.web(&["--read-only"]);
        let (status, html) = get(&format!("{url}/batches/{}", m.batch), false);
        assert_eq!(status, 200, "{html}");
        assert!(!html.contains("unfinished runs"), "{html}");
        assert!(!html.contains("name=\"csrf\""), "{html}");
        let (status, _, _) = post(
            &format!("{url}/batches/{}/cancel", m.batch),
            false,
            &[("csrf", "x")],
        );
        assert_eq!(status, 403);
    }
    let (_web, url) = site.web(&[]);
    let (_, html) = get(&format!("{url}/batches/{}", m.batch), false);
    let secret = csrf(&html);
    let cancel = format!("{url}/batches/{}/cancel", m.batch);

    // Without the secret: refused, nothing changed.
    let (status, _, _) = post(&cancel, false, &[("csrf", "stale")]);
    assert_eq!(status, 403);
    let (status, _, _) = post(&cancel, false, &[]);
    assert_eq!(status, 403);
    assert_eq!(site.state(&m.runs[4]), "queued");

    // Cancel: the queued and the blocked run; back on the batch's page with a notice.
    let (status, location, _) = post(&cancel, false, &[("csrf", &secret)]);
    assert_eq!(status, 303);
    let location = location.unwrap();
    assert!(
        location.starts_with(&format!("/batches/{}?notice=", m.batch)),
        "{location}"
    );
    let (_, html) = get(&format!("{url}{location}"), false);
    assert!(html.contains("Cancelled 2 runs"), "{html}");
    assert_eq!(site.state(&m.runs[4]), "cancelled");
    assert_eq!(site.state(&m.runs[5]), "cancelled");
    let v = get_json(&format!("{url}/batches/{}", m.batch));
    assert_eq!(v["state"], "completed");
    assert_eq!(
        (v["pending"].clone(), v["cancelled"].clone()),
        (json!(0), json!(3))
    );

    // Retry (JSON, as the CLI answers): the failed and the three cancelled runs.
    let (status, _, body) = post(
        &format!("{url}/batches/{}/retry", m.batch),
        true,
        &[("csrf", &secret)],
    );
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["action"], "retry");
    assert_eq!(v["done"], 4);
    assert_eq!(v["retried"], 4);
    let v = get_json(&format!("{url}/batches/{}", m.batch));
    assert_eq!(v["state"], "running");
    assert_eq!(v["pending"], 4);
}
