//! The dashboard in a real browser: Chromium driven through chromedriver (WebDriver, via
//! fantoccini) against a real `toolq web` process, real workers and a real database. Every
//! wait has a deadline; nothing sleeps for a fixed time. Screenshots of every page go to
//! target/screenshots/ for a person to look at.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::support::wait_until;
use crate::web::Site;

/// The one line a machine without the browser gets.
const MISSING: &str = "install Debian packages chromium chromium-driver";
/// How long any one wait may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

fn find_program(names: &[&str]) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!("{MISSING}");
}

/// chromedriver in its own process group (killed whole on drop, browser included) and a
/// WebDriver session on a fresh profile.
struct Browser {
    driver: std::process::Child,
    wd: Client,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.driver.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

impl Browser {
    async fn start() -> Browser {
        let chromium = find_program(&["chromium", "chromium-browser"]);
        let chromedriver = find_program(&["chromedriver"]);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect(MISSING);
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        });
        let caps = match caps {
            serde_json::Value::Object(m) => m,
            _ => unreachable!(),
        };
        let url = format!("http://127.0.0.1:{port}");
        let start = Instant::now();
        let wd = loop {
            let attempt =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(caps.clone())
                    .connect(&url)
                    .await;
            match attempt {
                Ok(wd) => break wd,
                Err(e) if start.elapsed() < DEADLINE => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("chromedriver did not start a session ({e}); {MISSING}"),
            }
        };
        Browser {
            driver,
            wd,
            _profile: profile,
        }
    }

    async fn go(&self, url: &str) {
        self.wd.goto(url).await.unwrap();
    }

    async fn text(&self, css: &str) -> Option<String> {
        match self.wd.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.ok(),
            Err(_) => None,
        }
    }

    /// Waits until the element's text satisfies `ok`; returns that text.
    async fn wait_text(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            if let Some(t) = self.text(css).await
                && ok(&t)
            {
                return t;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "timed out waiting for {what} in {css}; it shows {:?}",
                self.text(css).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the element, finding it again while the page's live refresh has it swapped
    /// out or not yet interactable (a refused click did not happen, so trying again is safe).
    async fn click(&self, css: &str) {
        let start = Instant::now();
        loop {
            let tried = match self.wd.find(Locator::Css(css)).await {
                Ok(e) => e.click().await,
                Err(e) => Err(e),
            };
            match tried {
                Ok(()) => return,
                Err(e) => assert!(start.elapsed() < DEADLINE, "could not click {css}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Types `text` into the (cleared) field, retrying like [`Browser::click`].
    async fn type_into(&self, css: &str, text: &str) {
        let start = Instant::now();
        loop {
            let tried = match self.wd.find(Locator::Css(css)).await {
                Ok(e) => match e.clear().await {
                    Ok(()) => e.send_keys(text).await,
                    Err(err) => Err(err),
                },
                Err(e) => Err(e),
            };
            match tried {
                Ok(()) => return,
                Err(e) => assert!(start.elapsed() < DEADLINE, "could not type into {css}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn js(&self, script: &str) -> serde_json::Value {
        self.wd.execute(script, vec![]).await.unwrap()
    }

    /// Waits for the page's next live refresh (so what is checked went through one swap).
    async fn refreshed(&self) {
        let start = Instant::now();
        while self
            .js("return Number(document.documentElement.dataset.refreshed || 0)")
            .await
            .as_i64()
            .unwrap_or(0)
            < 1
        {
            assert!(start.elapsed() < DEADLINE, "the page never refreshed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn shot(&self, name: &str) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let png = self.wd.screenshot().await.unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    async fn close(self) {
        let _ = self.wd.clone().close().await;
    }
}

fn shell(script: &str) -> String {
    json!({"argv": ["sh", "-c", script]}).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn browser_run_goes_queued_running_completed_with_its_log_followed_and_cancel() {
    let site = Site::new();
    let (_web, url) = site.web(&[]);
    let b = Browser::start().await;
    let id = site.enqueue(&[
        "shell",
        "--args",
        &shell("for i in $(seq 1 40); do echo line-$i; sleep 0.1; done"),
        "--title",
        "Counting to forty",
    ]);
    b.go(&format!("{url}/runs/{id}")).await;
    b.js("window.__same_page = true; return 1").await;
    b.wait_text("#head .state", "queued", |t| t == "queued")
        .await;
    b.shot("run-queued").await;
    let _worker = site.worker();
    b.wait_text("#head .state", "running", |t| t == "running")
        .await;
    b.wait_text("#log", "the log's first lines", |t| t.contains("line-3"))
        .await;
    b.shot("run-running").await;
    b.wait_text("#head .state", "completed", |t| t == "completed")
        .await;
    let log = b
        .wait_text("#log", "the whole log", |t| t.contains("line-40"))
        .await;
    assert!(log.contains("line-1\n"), "{log}");
    // Followed: scrolled to the end, and all of it happened without a reload.
    let gap = b
        .js("var l = document.getElementById('log'); return l.scrollHeight - l.scrollTop - l.clientHeight")
        .await;
    assert!(gap.as_f64().unwrap() <= 2.0, "log not followed: {gap}");
    assert_eq!(
        b.js("return window.__same_page === true").await,
        json!(true)
    );
    b.shot("run-completed").await;

    let long = site.enqueue(&["sleep", "--args", r#"{"ms":60000}"#, "--title", "Long nap"]);
    b.go(&format!("{url}/runs/{long}")).await;
    b.wait_text("#head .state", "running", |t| t == "running")
        .await;
    b.click("form[action$='/cancel'] button").await;
    b.wait_text("#head .state", "cancelled", |t| t == "cancelled")
        .await;
    assert_eq!(site.state(&long), "cancelled");
    b.shot("run-cancelled").await;
    b.go(&format!("{url}/runs")).await;
    b.wait_text("#runs", "both runs", |t| {
        t.contains("Long nap") && t.contains("Counting")
    })
    .await;
    b.shot("runs").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn browser_approves_a_waiting_run_and_bulk_retries_failed_runs() {
    let site = Site::new();
    let (_web, url) = site.web(&[]);
    let _worker = site.worker();
    let b = Browser::start().await;
    let id = site.enqueue(&[
        "add",
        "--args",
        r#"{"a":2,"b":3}"#,
        "--title",
        "Add two numbers",
    ]);
    b.go(&format!("{url}/approvals")).await;
    b.wait_text("#approvals", "the waiting run", |t| {
        t.contains("Add two numbers")
    })
    .await;
    b.shot("approvals").await;
    b.type_into(".approval input[name=note]", "looks fine")
        .await;
    b.click(".approval button.ok").await;
    b.wait_text("#approvals", "no waiting run", |t| {
        t.contains("No run is waiting")
    })
    .await;
    b.go(&format!("{url}/runs/{id}")).await;
    b.wait_text("#head .state", "completed", |t| t == "completed")
        .await;
    let fields = b.text("#fields").await.unwrap();
    assert!(fields.contains("approved by web: looks fine"), "{fields}");
    b.shot("run-approved").await;

    let flag = site.dir.path().join("flag");
    let script = format!("test -e '{}'", flag.display());
    let failed: Vec<String> = (0..3)
        .map(|i| {
            site.enqueue(&[
                "shell",
                "--args",
                &shell(&script),
                "--max-attempts",
                "1",
                "--title",
                &format!("Needs the flag {i}"),
            ])
        })
        .collect();
    wait_until("three failed runs", || {
        failed.iter().all(|id| site.state(id) == "failed")
    });
    b.go(&format!("{url}/runs?state=failed")).await;
    b.wait_text("#runs", "the failed runs", |t| {
        t.matches("Needs the flag").count() == 3
    })
    .await;
    b.shot("runs-failed").await;
    b.click("form.bulk button[value=retry]").await;
    b.wait_text("#bulk-count", "the count", |t| t == "3").await;
    b.shot("bulk-confirm").await;
    std::fs::write(&flag, "").unwrap();
    b.click("#confirm").await;
    b.wait_text("p.notice", "the outcome", |t| {
        t.contains("Re-queued 3 runs")
    })
    .await;
    // The filtered list follows live: the runs leave `failed` as the worker completes them.
    b.wait_text("#runs", "no failed run left", |t| {
        t.contains("No runs match")
    })
    .await;
    wait_until("three completed runs", || {
        failed.iter().all(|id| site.state(id) == "completed")
    });
    b.go(&format!("{url}/")).await;
    b.wait_text("#overview", "the completed runs", |t| {
        t.contains("Last hour")
    })
    .await;
    b.shot("overview").await;
    b.go(&format!("{url}/workers")).await;
    b.wait_text("#workers", "the live worker", |t| t.contains("alive"))
        .await;
    b.shot("workers").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn browser_shows_a_schedule_across_a_dst_change_and_run_text_inert() {
    let site = Site::new();
    let (_web, url) = site.web(&[]);
    let b = Browser::start().await;
    // 09:00 in Berlin on every day from the 25th to the 31st of March: the last Sunday of
    // March, when Berlin moves from CET (+01:00) to CEST (+02:00), is always among them.
    let out = site.toolq(&[
        "--json",
        "schedule",
        "add",
        "echo",
        "--args",
        r#"{"message":"spring"}"#,
        "--cron",
        "0 9 25-31 3 *",
        "--tz",
        "Europe/Berlin",
        "--title",
        "Spring report",
    ]);
    assert!(out.status.success(), "{out:?}");
    let sid = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    b.go(&format!("{url}/schedules/{sid}")).await;
    let next = b
        .wait_text("#next", "the next fires", |t| t.contains("09:00:00"))
        .await;
    let rows: Vec<&str> = next.lines().filter(|l| l.contains(":00:00")).collect();
    assert!(rows.len() >= 7, "{next}");
    assert!(
        rows.iter().all(|r| r.contains(" 09:00:00+0")),
        "local time stays 09:00: {next}"
    );
    assert!(
        next.contains("09:00:00+01:00 CET") && next.contains("08:00:00Z"),
        "{next}"
    );
    assert!(
        next.contains("09:00:00+02:00 CEST") && next.contains("07:00:00Z"),
        "{next}"
    );
    b.shot("schedule-dst").await;
    b.go(&format!("{url}/schedules")).await;
    b.type_into("input[name=cron]", "30 2 * * *").await;
    b.type_into("input[name=tz]", "Europe/Berlin").await;
    b.click("form.filters button").await;
    b.wait_text("table.fires", "the preview", |t| t.contains("02:30:00"))
        .await;
    b.shot("schedules").await;

    let script_tag = "<script>window.__xss = 1</script>";
    let img_tag = "\"><img src=x onerror=\"window.__xss = 2\">";
    let title = format!("{img_tag}{script_tag}");
    let session = img_tag;
    let id = site.enqueue(&[
        "shell",
        "--args",
        &json!({"argv": ["printf", "%s\\n", script_tag, img_tag]}).to_string(),
        "--title",
        &title,
        "--session",
        session,
    ]);
    let out = site.toolq(&["worker", "--drain"]);
    assert!(out.status.success(), "{out:?}");
    let pages = [
        ("xss-run", format!("{url}/runs/{id}")),
        ("xss-runs", format!("{url}/runs")),
        (
            "session",
            format!(
                "{url}/sessions/{}",
                session
                    .bytes()
                    .map(|b| format!("%{b:02X}"))
                    .collect::<String>()
            ),
        ),
    ];
    for (name, page) in pages {
        b.go(&page).await;
        b.refreshed().await;
        assert_eq!(
            b.js("return typeof window.__xss").await,
            json!("undefined"),
            "{page}"
        );
        assert_eq!(
            b.js("return document.querySelectorAll('img').length").await,
            json!(0),
            "{page}"
        );
        assert_eq!(
            b.js("return document.querySelectorAll('script').length")
                .await,
            json!(1),
            "only the dashboard's own script: {page}"
        );
        assert!(
            b.wd.get_alert_text().await.is_err(),
            "an alert is open on {page}"
        );
        let body = b.text("main").await.unwrap();
        assert!(
            body.contains(img_tag) || body.contains("…"),
            "{page}: {body}"
        );
        b.shot(name).await;
    }
    b.go(&format!("{url}/runs/{id}")).await;
    assert_eq!(
        b.text("#title").await.unwrap(),
        title,
        "the title shows as text"
    );
    let log = b.text("#log").await.unwrap();
    assert!(log.contains(script_tag) && log.contains(img_tag), "{log}");
    let args = b
        .js("return document.querySelector('pre.json').textContent")
        .await;
    assert!(
        args.as_str().unwrap().contains("window.__xss = 1"),
        "{args}"
    );
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn browser_shows_a_mixed_batch_its_runs_links_and_cancels_it() {
    let site = Site::new();
    let m = crate::compose_web::mixed(&site).await;
    let (_web, url) = site.web(&[]);
    let b = Browser::start().await;
    b.go(&format!("{url}/batches")).await;
    b.wait_text("#batches", "both batches", |t| {
        t.contains("nightly import") && t.contains("small")
    })
    .await;
    b.shot("batches").await;

    b.go(&format!("{url}/batches/{}", m.batch)).await;
    let progress = b
        .wait_text("#progress", "the progress", |t| t.contains("4 of 6 final"))
        .await;
    assert!(progress.contains("67%"), "{progress}");
    let counts = b.text("#bcounts").await.unwrap();
    assert!(
        counts.contains("blocked") && counts.contains("queued"),
        "{counts}"
    );
    let failures = b.text("#failures").await.unwrap();
    assert!(
        failures.contains("divide") && failures.contains("divide by zero"),
        "{failures}"
    );
    b.refreshed().await;
    b.shot("batch-mixed").await;
    b.js("document.getElementById('bruns').scrollIntoView(); return 1")
        .await;
    b.shot("batch-mixed-runs").await;

    // The blocked run's page: the note and its links.
    b.go(&format!("{url}/runs/{}", m.runs[5])).await;
    b.wait_text("#waiting", "the blocked note", |t| {
        t.contains("Blocked by its parents")
    })
    .await;
    let links = b.text("#links").await.unwrap();
    assert!(
        links.contains(&m.batch) && links.contains("Waits for (1)"),
        "{links}"
    );
    b.shot("run-blocked-links").await;
    // The spawning run: its child; and from the link, back to the batch.
    b.go(&format!("{url}/runs/{}", m.runs[0])).await;
    b.wait_text("#links", "the links", |t| t.contains("Spawned (1)"))
        .await;
    b.shot("run-links").await;
    b.click("#links a#batch").await;
    b.wait_text("#title", "the batch's page", |t| t == "nightly import")
        .await;

    // Cancel its unfinished runs: back with a notice, the batch completed.
    b.click("form[action$='/cancel'] button").await;
    b.wait_text("#notice", "the notice", |t| t.contains("Cancelled 2 runs"))
        .await;
    b.wait_text("#head .state", "completed", |t| t == "completed")
        .await;
    assert_eq!(site.state(&m.runs[5]), "cancelled");
    b.shot("batch-cancelled").await;
    b.close().await;
}
