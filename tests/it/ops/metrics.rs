//! The metrics endpoint, scraped over loopback with a plain TCP client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolq::metrics::serve::MetricsServer;
use toolq::{Clock, EnqueueRequest, WorkerOptions};

use crate::support::{TestEnv, wait_for};

async fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let path = path.to_string();
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.to_string(), body.to_string())
    })
    .await
    .unwrap()
}

/// The value of the sample line that starts with `series ` (name plus labels).
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{body}"))
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn metrics_endpoint_serves_counters_and_database_gauges() {
    let env = TestEnv::new();
    let server = MetricsServer::bind("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr().unwrap();
    assert_ne!(addr.port(), 0);
    let worker = env.client.worker(WorkerOptions::default());
    let metrics = worker.metrics();
    let stop = CancellationToken::new();
    let stop_server = CancellationToken::new();
    let serving =
        tokio::spawn(server.serve(env.client.clone(), metrics.clone(), stop_server.clone()));
    let running = tokio::spawn(worker.run(stop.clone()));

    for i in 0..3 {
        env.client
            .enqueue(EnqueueRequest::new(
                "echo",
                json!({"message": format!("m{i}")}),
            ))
            .await
            .unwrap();
    }
    let mut req = EnqueueRequest::new("fail", json!({}));
    req.max_attempts = Some(1);
    env.client.enqueue(req).await.unwrap();
    // Waiting for later, in another session: queue depth.
    let mut req = EnqueueRequest::new("counter", json!({})).session("s2");
    req.run_at = Some(env.clock.now() + chrono::Duration::hours(1));
    env.client.enqueue(req).await.unwrap();

    let body = wait_for("four attempts recorded", async || {
        let (head, body) = get(addr, "/metrics").await;
        // One scrape reads the database before the counters, so a finish committed in
        // between shows in the counters only: wait until both agree.
        let done = body.contains("toolq_finishes_total{outcome=\"completed\"} 3")
            && body.contains("toolq_finishes_total{outcome=\"failed\"} 1")
            && body.contains("toolq_runs{state=\"completed\"} 3")
            && body.contains("toolq_runs{state=\"failed\"} 1");
        (done.then_some((head, body.clone())), body)
    })
    .await;
    let (head, body) = body;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert_eq!(sample(&body, "toolq_runs{state=\"completed\"}"), 3.0);
    assert_eq!(sample(&body, "toolq_runs{state=\"failed\"}"), 1.0);
    assert_eq!(sample(&body, "toolq_runs{state=\"queued\"}"), 1.0);
    assert_eq!(sample(&body, "toolq_runs{state=\"running\"}"), 0.0);
    assert_eq!(sample(&body, "toolq_claims_total"), 4.0);
    assert!(sample(&body, "toolq_claim_latency_seconds_count") >= 1.0);
    assert!(body.contains("toolq_claim_latency_seconds_bucket{le=\"+Inf\"}"));
    assert_eq!(
        sample(
            &body,
            "toolq_queue_depth{session=\"s2\",tool=\"counter\",state=\"queued\"}"
        ),
        1.0
    );
    assert!(sample(&body, "toolq_busy_retries_total") >= 0.0);
    // Enqueues, claims and finishes above were all write transactions of this process.
    assert!(sample(&body, "toolq_write_transactions_total") >= 5.0);
    assert!(sample(&body, "toolq_write_statement_seconds_total") > 0.0);
    assert!(sample(&body, "toolq_write_commit_seconds_total") > 0.0);
    // The WAL gauges are SQLite's (the file toolq checkpoints); on Postgres they stay 0.
    if crate::support::ENGINE == crate::support::Engine::Sqlite {
        assert!(
            sample(&body, "toolq_wal_bytes") > 0.0,
            "writes went to the WAL"
        );
    }
    assert_eq!(sample(&body, "toolq_wal_pinned"), 0.0);
    assert!(body.contains("toolq_wal_backlog_frames "));
    assert!(body.trim_end().ends_with("# EOF"));
    assert_eq!(metrics.claims(), 4);

    assert_eq!(sample(&body, "toolq_schedule_lag_seconds"), 0.0);

    let (head, _) = get(addr, "/other").await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    // With the worker stopped (nothing fires schedules), an enabled schedule due 90 s ago
    // shows as lag; the counters keep their values.
    stop.cancel();
    running.await.unwrap().unwrap();
    // An enabled schedule due 90 s ago: schedule lag.
    let due = toolq::store::codec::ts(env.clock.now() - chrono::Duration::seconds(90));
    env.db.exec(&format!(
        "INSERT INTO schedules (id, session_id, tool, args, title, cron_expression, \
         next_trigger_at, created_at, updated_at) \
         VALUES ('sch_lag', 's2', 'echo', '{{}}', 'lag', '* * * * *', '{due}', '{due}', '{due}')"
    ));
    let (_, body) = get(addr, "/metrics").await;
    assert_eq!(sample(&body, "toolq_schedule_lag_seconds"), 90.0);
    assert_eq!(sample(&body, "toolq_claims_total"), 4.0);
    stop_server.cancel();
    serving.await.unwrap();
}
