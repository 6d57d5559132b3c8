//! Issue 39, traces: a real OTLP/HTTP receiver (an axum server in the test) takes the spans a
//! real CLI enqueue and a real worker process export, decodes them (protobuf), and checks
//! their names and parent links: enqueue under the caller's span, claim, execute and end
//! under the enqueue, the step and the wait under execute, one trace. With tracing off,
//! nothing is sent. The worker is the host binary of `examples/custom_cli.rs`, whose tool
//! records a step; `await_event` gives the wait.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use crate::support::{Killed, wait_until};
use crate::web::Site;

/// The caller's span: the trace every span of the run must join.
const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// One received span, flattened.
#[derive(Debug, Clone)]
struct Got {
    name: String,
    trace: String,
    id: String,
    parent: String,
    attrs: BTreeMap<String, String>,
    service: String,
}

/// An OTLP/HTTP traces receiver on a loopback port, keeping every request body.
struct Receiver {
    url: String,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let kept = bodies.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let app = axum::Router::new().route(
                    "/v1/traces",
                    axum::routing::post(move |body: axum::body::Bytes| {
                        let kept = kept.clone();
                        async move {
                            kept.lock().unwrap().push(body.to_vec());
                            // An empty ExportTraceServiceResponse.
                            (
                                [("content-type", "application/x-protobuf")],
                                Vec::<u8>::new(),
                            )
                        }
                    }),
                );
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(l.local_addr().unwrap()).unwrap();
                axum::serve(l, app).await.unwrap();
            });
        });
        let addr = rx.recv().unwrap();
        Receiver {
            url: format!("http://{addr}/v1/traces"),
            bodies,
        }
    }

    fn requests(&self) -> usize {
        self.bodies.lock().unwrap().len()
    }

    /// Every span received so far, decoded.
    fn spans(&self) -> Vec<Got> {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let mut out = Vec::new();
        for body in self.bodies.lock().unwrap().iter() {
            let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
            for rs in req.resource_spans {
                let service = rs
                    .resource
                    .iter()
                    .flat_map(|r| &r.attributes)
                    .find(|kv| kv.key == "service.name")
                    .map(|kv| format!("{:?}", kv.value))
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        let attrs = s
                            .attributes
                            .iter()
                            .map(|kv| {
                                use opentelemetry_proto::tonic::common::v1::any_value::Value;
                                let v = match kv.value.as_ref().and_then(|v| v.value.clone()) {
                                    Some(Value::StringValue(s)) => s,
                                    Some(Value::IntValue(i)) => i.to_string(),
                                    other => format!("{other:?}"),
                                };
                                (kv.key.clone(), v)
                            })
                            .collect();
                        out.push(Got {
                            name: s.name,
                            trace: hex(&s.trace_id),
                            id: hex(&s.span_id),
                            parent: hex(&s.parent_span_id),
                            attrs,
                            service: service.clone(),
                        });
                    }
                }
            }
        }
        out
    }
}

/// The host binary on the site's database, with no OTEL_* or TOOLQ_* variable of ours.
fn host(site: &Site, endpoint: &str, on: bool) -> Command {
    let mut cmd = Command::new(crate::support::custom_cli_example());
    cmd.env_remove("RUST_LOG").env_remove("TRACEPARENT");
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if name.starts_with("TOOLQ_") || name.starts_with("PG") || name.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("PGPASSFILE", "/nonexistent/toolq-tests/pgpass")
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        // Export soon after a span ends, not after the default 5 s.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    if on {
        cmd.env("TOOLQ_TRACES__ENABLED", "true");
    }
    cmd.arg("--db")
        .arg(site.db())
        .arg("--config")
        .arg(site.dir.path().join("toolq.toml"));
    cmd
}

fn enqueue(site: &Site, endpoint: &str, on: bool, args: &[&str]) -> String {
    let out = host(site, endpoint, on)
        .env("TRACEPARENT", CALLER)
        .arg("enqueue")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "enqueue {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs a worker until `ids` have ended, then stops it with SIGTERM (a clean stop flushes
/// the spans still queued).
fn work(site: &Site, endpoint: &str, on: bool, ids: &[&str]) {
    let child = host(site, endpoint, on)
        .arg("worker")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut worker = Killed(child);
    for id in ids {
        wait_until(&format!("run {id} ends"), || {
            !matches!(site.state(id).as_str(), "queued" | "running")
        });
    }
    let pid = nix::unistd::Pid::from_raw(worker.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = worker.0.wait().unwrap();
    assert!(status.success(), "worker exit: {status:?}");
}

/// The span tree, indented by parent, as the closing note quotes it.
fn tree(spans: &[Got]) -> String {
    fn walk(spans: &[Got], parent: &str, depth: usize, out: &mut String) {
        for s in spans.iter().filter(|s| s.parent == parent) {
            let what: Vec<String> = ["run.id", "attempt", "outcome", "step.name", "wait.kind"]
                .iter()
                .filter_map(|k| s.attrs.get(*k).map(|v| format!("{k}={v}")))
                .collect();
            out.push_str(&format!(
                "{}{} [{}] {}\n",
                "  ".repeat(depth),
                s.name,
                &s.id[..8],
                what.join(" ")
            ));
            walk(spans, &s.id, depth + 1, out);
        }
    }
    let mut out = format!(
        "trace {} (caller span {})\n",
        &CALLER[3..35],
        &CALLER[36..52]
    );
    walk(spans, &CALLER[36..52], 1, &mut out);
    out
}

#[test]
fn spans_follow_a_run_from_the_callers_trace_through_a_worker_process() {
    let rx = Receiver::start();
    let site = Site::new();
    let shout = enqueue(
        &site,
        &rx.url,
        true,
        &["shout", "--args", r#"{"text":"hi"}"#],
    );
    let wait = enqueue(
        &site,
        &rx.url,
        true,
        &["await_event", "--args", r#"{"event":"go","timeout":"1s"}"#],
    );
    // The run stores its enqueue span's context, in the caller's trace.
    let stored = site
        .db()
        .text(&format!(
            "SELECT traceparent FROM runs WHERE id = '{shout}'"
        ))
        .unwrap();
    assert!(stored.starts_with(&CALLER[..36]), "{stored}");
    work(&site, &rx.url, true, &[&shout, &wait]);

    let spans = rx.spans();
    println!("{}", tree(&spans));
    assert!(
        spans.iter().all(|s| s.trace == CALLER[3..35]),
        "one trace: {spans:#?}"
    );
    assert!(
        spans.iter().all(|s| s.service.contains("toolq")),
        "{spans:#?}"
    );
    let by_id: BTreeMap<&str, &Got> = spans.iter().map(|s| (s.id.as_str(), s)).collect();
    let of = |run: &str, name: &str| -> Vec<&Got> {
        spans
            .iter()
            .filter(|s| s.name == name && s.attrs.get("run.id").map(String::as_str) == Some(run))
            .collect()
    };
    for run in [&shout, &wait] {
        let enq = of(run, "toolq.enqueue");
        assert_eq!(enq.len(), 1, "{run}: {spans:#?}");
        assert_eq!(
            enq[0].parent,
            CALLER[36..52],
            "enqueue hangs under the caller"
        );
        assert_eq!(stored.len(), 55);
        for name in ["toolq.claim", "toolq.execute", "toolq.end"] {
            let got = of(run, name);
            assert!(!got.is_empty(), "{run}: no {name}: {spans:#?}");
            assert!(
                got.iter().all(|s| s.parent == enq[0].id),
                "{name} under the enqueue"
            );
        }
    }
    assert_eq!(
        site.db().text(&format!(
            "SELECT traceparent FROM runs WHERE id = '{shout}'"
        )),
        Some(format!(
            "00-{}-{}-01",
            &CALLER[3..35],
            of(&shout, "toolq.enqueue")[0].id
        ))
    );
    // The step and the wait hang under an execute span of their run.
    let step: Vec<&Got> = spans.iter().filter(|s| s.name == "toolq.step").collect();
    assert_eq!(step.len(), 1, "{spans:#?}");
    assert_eq!(step[0].attrs["step.name"], "shout");
    let parent = by_id[step[0].parent.as_str()];
    assert_eq!(
        (parent.name.as_str(), parent.attrs["run.id"].as_str()),
        ("toolq.execute", shout.as_str())
    );
    let waits: Vec<&Got> = spans.iter().filter(|s| s.name == "toolq.wait").collect();
    assert!(!waits.is_empty(), "{spans:#?}");
    for w in waits {
        let parent = by_id[w.parent.as_str()];
        assert_eq!(
            (parent.name.as_str(), parent.attrs["run.id"].as_str()),
            ("toolq.execute", wait.as_str())
        );
        assert_eq!(w.attrs["wait.kind"], "event");
    }
    // The wait suspended the run once: two invocations, two executes.
    assert_eq!(of(&wait, "toolq.execute").len(), 2, "{spans:#?}");
}

#[test]
fn with_tracing_off_nothing_is_sent_and_the_callers_traceparent_is_kept() {
    let rx = Receiver::start();
    let site = Site::new();
    let id = enqueue(
        &site,
        &rx.url,
        false,
        &["shout", "--args", r#"{"text":"hi"}"#],
    );
    work(&site, &rx.url, false, &[&id]);
    assert_eq!(site.state(&id), "completed");
    assert_eq!(rx.requests(), 0, "nothing exported");
    // The caller's context is stored as given, so a worker with tracing on would continue it.
    assert_eq!(
        site.db()
            .text(&format!("SELECT traceparent FROM runs WHERE id = '{id}'"))
            .as_deref(),
        Some(CALLER)
    );
}

#[test]
fn every_run_of_an_enqueue_file_keeps_the_callers_traceparent_with_or_without_a_batch() {
    let rx = Receiver::start();
    let site = Site::new();
    let file = site.dir.path().join("runs.jsonl");
    std::fs::write(
        &file,
        "{\"tool\":\"shout\",\"args\":{\"text\":\"a\"}}\n{\"tool\":\"shout\",\"args\":{\"text\":\"b\"}}\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let ids = enqueue(&site, &rx.url, false, &["--file", file]);
    let batch = enqueue(&site, &rx.url, false, &["--file", file, "--batch"]);
    assert_eq!(ids.lines().count(), 2, "{ids}");
    assert!(batch.starts_with("bt_"), "{batch}");
    let db = site.db();
    assert_eq!(db.count("SELECT count(*) FROM runs"), 4);
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM runs WHERE traceparent = '{CALLER}'"
        )),
        4,
        "every run of both files joins the caller's trace"
    );
    // A bad variable is refused before the file is read, and writes nothing.
    refuses_a_bad_traceparent(host(&site, &rx.url, false), &["enqueue", "--file", file]);
    assert_eq!(db.count("SELECT count(*) FROM runs"), 4, "nothing written");
}

/// `cmd args` with `TRACEPARENT=00-nope` exits 2 naming the variable and its value.
fn refuses_a_bad_traceparent(mut cmd: Command, args: &[&str]) {
    let out = cmd
        .env("TRACEPARENT", "00-nope")
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("TRACEPARENT") && err.contains("00-nope"),
        "{err}"
    );
}

#[test]
fn a_bad_endpoint_or_traceparent_exits_2_naming_it_and_writes_nothing() {
    let rx = Receiver::start();
    let site = Site::new();
    let out = host(&site, "localhost:4318", true)
        .args(["enqueue", "shout", "--args", r#"{"text":"hi"}"#])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") && err.contains("localhost:4318"),
        "{err}"
    );
    refuses_a_bad_traceparent(
        host(&site, &rx.url, true),
        &["enqueue", "shout", "--args", r#"{"text":"hi"}"#],
    );
    assert_eq!(
        site.db().count("SELECT count(*) FROM runs"),
        0,
        "nothing written"
    );
}

#[test]
fn the_api_takes_the_callers_traceparent_header_and_refuses_a_bad_one() {
    let api = crate::api::Api::new();
    let body =
        serde_json::to_vec(&serde_json::json!({"tool": "echo", "args": {"message": "x"}})).unwrap();
    let json = ("Content-Type", "application/json");
    let a = api.call(
        "POST",
        "/runs",
        &[json, ("traceparent", CALLER)],
        Some(&body),
    );
    assert_eq!(a.status, 201, "{a:?}");
    let id = a.body["id"].as_str().unwrap();
    // Tracing is off in this process: the caller's context is stored as given.
    assert_eq!(
        api.site
            .db()
            .text(&format!("SELECT traceparent FROM runs WHERE id = '{id}'"))
            .as_deref(),
        Some(CALLER)
    );
    let many = serde_json::to_vec(&serde_json::json!({"runs": [
        {"tool": "echo", "args": {"message": "a"}},
        {"tool": "echo", "args": {"message": "b"}}
    ]}))
    .unwrap();
    let a = api.call(
        "POST",
        "/runs/many",
        &[json, ("traceparent", CALLER)],
        Some(&many),
    );
    assert_eq!(a.status, 201, "{a:?}");
    assert_eq!(
        api.site.db().count(&format!(
            "SELECT count(*) FROM runs WHERE traceparent = '{CALLER}'"
        )),
        3
    );
    let a = api.call(
        "POST",
        "/runs",
        &[json, ("traceparent", "00-bad")],
        Some(&body),
    );
    let p = a.problem(400);
    assert!(p.to_string().contains("traceparent"), "{p}");
    assert_eq!(
        api.site.db().count("SELECT count(*) FROM runs"),
        3,
        "nothing written"
    );
}
