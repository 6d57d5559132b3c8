//! A worker that loses its Postgres connection: its tools keep running, its writes back off
//! and retry, and each run is recorded once; a run whose lease expired meanwhile (and that
//! another host took back and ran) is fenced out when the worker comes back. The outage is a
//! TCP proxy between the worker and the server that the test cuts and restores.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolq::worker::rescue::rescue_tick;
use toolq::{Client, Config, EnqueueRequest, RegistryBuilder, RunState, WorkerOptions};

use crate::support::{TestEnv, pg, wait_until};

/// Forwards local connections to the test server until cut: a cut closes every open
/// connection and refuses new ones until restored.
pub(crate) struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub(crate) fn start() -> Proxy {
        let upstream = pg::server().port;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (up2, open2) = (up.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                // Checked and recorded under the lock `cut` holds, so a connection accepted
                // while it cuts is either refused or cut with the others.
                let mut list = open2.lock().unwrap();
                if !up2.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                list.push(client.try_clone().unwrap());
                list.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, up, open }
    }

    /// `url` (of the test server) through this proxy.
    pub(crate) fn url(&self, url: &str) -> String {
        url.replace(
            &format!(":{}/", pg::server().port),
            &format!(":{}/", self.port),
        )
    }

    pub(crate) fn cut(&self) {
        let mut open = self.open.lock().unwrap();
        self.up.store(false, Ordering::SeqCst);
        for s in open.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    pub(crate) fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// Points `c` (a test database on the server) at the proxy.
fn proxied(proxy: &Proxy, c: &mut Config) {
    c.db_path = proxy.url(&c.db_path);
    c.db_url = c.db_url.as_deref().map(|u| proxy.url(u));
}

fn env_through(proxy: &Proxy) -> TestEnv {
    TestEnv::with_config(|c| {
        proxied(proxy, c);
        c.worker.lease = Duration::from_secs(30);
        // The manual clock jumps past a lease during the outage; a draining worker must not
        // give up on the database for that.
        c.worker.stall_timeout = Duration::from_secs(86_400);
    })
}

fn running(env: &TestEnv) -> i64 {
    env.db
        .count("SELECT count(*) FROM runs WHERE state = 'running'")
}

/// Enqueues one 1.5 s `sleep` run.
async fn enqueue_sleep(env: &TestEnv) -> toolq::RunId {
    env.client
        .enqueue(EnqueueRequest::new("sleep", json!({"ms": 1500})))
        .await
        .unwrap()
        .run_id
}

/// Starts a draining worker and returns once it holds the one queued run: its claim's answer
/// came back through the proxy. (The row says `running` as soon as the claim commits, before
/// the answer arrives: a cut then would lose the answer, and the worker would never hold it.)
fn drain_holding_the_run(
    env: &TestEnv,
) -> tokio::task::JoinHandle<toolq::Result<toolq::WorkerReport>> {
    let worker = env.client.worker(WorkerOptions { drain: true });
    let metrics = worker.metrics();
    let handle = tokio::spawn(worker.run(Default::default()));
    wait_until("the worker claimed the run", || metrics.claims() == 1);
    assert_eq!(running(env), 1);
    handle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_the_database_keeps_its_run_going_and_records_it_once() {
    let proxy = Proxy::start();
    let env = env_through(&proxy);
    let id = enqueue_sleep(&env).await;
    let worker = drain_holding_the_run(&env);
    // The run ends while the database is unreachable: its end is retried until it commits.
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(running(&env), 1, "nothing was written during the outage");
    proxy.restore();
    let report = tokio::time::timeout(Duration::from_secs(60), worker)
        .await
        .expect("the worker drains once the database is back")
        .unwrap()
        .unwrap();
    assert_eq!((report.recorded, report.fenced_out), (1, 0), "{report:?}");
    let run = env.client.get(&id).await.unwrap();
    assert_eq!((run.state, run.attempt), (RunState::Completed, 1));
    let messages = format!("SELECT count(*) FROM inbox WHERE run_id = '{id}'");
    assert_eq!(env.db.count(&messages), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_lease_expired_during_the_outage_is_fenced_out_when_its_worker_returns() {
    let proxy = Proxy::start();
    let env = env_through(&proxy);
    // Another host on the same database, straight to the server.
    let other = host_on(&env.db.url, &env, "host-b");
    let id = enqueue_sleep(&env).await;
    let worker = drain_holding_the_run(&env);
    proxy.cut();
    // The lease runs out while the worker cannot reach the database: the other host takes
    // the run back and runs it to the end.
    env.clock.advance(chrono::Duration::seconds(60));
    let rescued = rescue_tick(other.core()).await.unwrap();
    assert_eq!(rescued.requeued, 1, "{rescued:?}");
    env.clock.advance(chrono::Duration::minutes(10));
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        other
            .worker(WorkerOptions { drain: true })
            .run(Default::default()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(report.recorded, 1);
    // The first worker's attempt ended during the outage; back online, its end is fenced out.
    proxy.restore();
    let report = tokio::time::timeout(Duration::from_secs(60), worker)
        .await
        .expect("the first worker finishes once the database is back")
        .unwrap()
        .unwrap();
    assert_eq!((report.recorded, report.fenced_out), (0, 1), "{report:?}");
    let run = env.client.get(&id).await.unwrap();
    assert_eq!((run.state, run.attempt), (RunState::Completed, 2));
    let finals =
        format!("SELECT count(*) FROM inbox WHERE run_id = '{id}' AND kind <> 'approval_request'");
    assert_eq!(env.db.count(&finals), 1, "one final message, for attempt 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_listening_connection_is_replaced_and_other_hosts_enqueues_still_wake_the_worker()
{
    let proxy = Proxy::start();
    // An hour-long poll: only the change feed (or its polling fallback) wakes the worker.
    let env = TestEnv::with_config(|c| {
        proxied(&proxy, c);
        c.worker.poll_interval = Duration::from_secs(3600);
        c.schedules.late_after = Duration::from_secs(7200);
    });
    let other = {
        let config = Config {
            db_path: env.db.url.clone(),
            ..Config::default()
        };
        let registry = RegistryBuilder::new().with_builtins().build().unwrap();
        Client::open_with_clock(config, registry, Arc::new(env.clock.clone())).unwrap()
    };
    // This test's database only: the other tests' workers listen on the same server.
    let listening = "SELECT count(*) FROM pg_stat_activity \
                     WHERE query = 'LISTEN toolq_changes' AND datname = current_database()";
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(
        env.client
            .worker(WorkerOptions::default())
            .run(stop.clone()),
    );
    wait_until("the worker listens", || env.db.count(listening) == 1);
    proxy.cut();
    wait_until("the listening connection is gone", || {
        env.db.count(listening) == 0
    });
    proxy.restore();
    wait_until("the worker listens again", || env.db.count(listening) == 1);
    let id = other
        .enqueue(EnqueueRequest::new("echo", json!({"message": "hi"})))
        .await
        .unwrap()
        .run_id;
    crate::support::wait_for("the run completed", async || {
        let run = env.client.get(&id).await.unwrap();
        (
            (run.state == RunState::Completed).then_some(()),
            run.state.to_string(),
        )
    })
    .await;
    stop.cancel();
    worker.await.unwrap().unwrap();
}

/// Another host (one slot) on the database at `url`, sharing `env`'s clock.
fn host_on(url: &str, env: &TestEnv, host: &str) -> Client {
    let mut config = Config {
        db_path: url.to_string(),
        ..Config::default()
    };
    config.worker.poll_interval = Duration::from_millis(20);
    config.worker.lease = Duration::from_secs(30);
    config.worker.concurrency = 1;
    config.worker.stall_timeout = Duration::from_secs(86_400);
    config.worker.host_id = Some(host.into());
    let registry = RegistryBuilder::new().with_builtins().build().unwrap();
    Client::open_with_clock(config, registry, Arc::new(env.clock.clone())).unwrap()
}

/// Issue 40, item 2: the database goes away for longer than a lease while a worker's run ends.
/// Back online, the worker is the first to look: it records its own run, and does not take it
/// back from itself as if its lease had expired (which dropped the result and ran it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_back_from_an_outage_longer_than_its_lease_records_its_own_run() {
    let proxy = Proxy::start();
    // A heartbeat too rare to extend the lease before the worker's own rescue pass looks.
    let env = TestEnv::with_config(|c| {
        proxied(&proxy, c);
        c.worker.lease = Duration::from_secs(30);
        c.worker.heartbeat_interval = Duration::from_secs(15);
        c.worker.stall_timeout = Duration::from_secs(86_400);
    });
    let id = enqueue_sleep(&env).await;
    let worker = drain_holding_the_run(&env);
    proxy.cut();
    env.clock.advance(chrono::Duration::seconds(60));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    proxy.restore();
    let report = tokio::time::timeout(Duration::from_secs(60), worker)
        .await
        .expect("the worker drains once the database is back")
        .unwrap()
        .unwrap();
    assert_eq!((report.recorded, report.fenced_out), (1, 0), "{report:?}");
    let run = env.client.get(&id).await.unwrap();
    assert_eq!((run.state, run.attempt), (RunState::Completed, 1));
    assert_eq!(run.errors, json!([]), "nothing was rescued");
}

/// Issue 40, item 2, across hosts: two live workers, each running one run, lose the server for
/// longer than a lease. Whichever is back first leaves the other's run alone for a lease, in
/// which the other extends its lease and records its run: nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_hosts_back_from_an_outage_do_not_rescue_each_others_runs() {
    let proxy = Proxy::start();
    let env = env_through(&proxy);
    let (a, b) = (
        host_on(&proxy.url(&env.db.url), &env, "host-a"),
        host_on(&proxy.url(&env.db.url), &env, "host-b"),
    );
    let mut ids = Vec::new();
    for session in ["s1", "s2"] {
        let req = EnqueueRequest::new("sleep", json!({"ms": 1500})).session(session);
        ids.push(env.client.enqueue(req).await.unwrap().run_id);
    }
    let mut handles = Vec::new();
    for (n, host) in [&a, &b].into_iter().enumerate() {
        let worker = host.worker(WorkerOptions { drain: true });
        let metrics = worker.metrics();
        handles.push(tokio::spawn(worker.run(Default::default())));
        wait_until("the host claimed a run", || metrics.claims() == 1);
        assert_eq!(running(&env), n as i64 + 1);
    }
    proxy.cut();
    env.clock.advance(chrono::Duration::seconds(60));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    proxy.restore();
    for handle in handles {
        let report = tokio::time::timeout(Duration::from_secs(60), handle)
            .await
            .expect("each host drains once the database is back")
            .unwrap()
            .unwrap();
        assert_eq!((report.recorded, report.fenced_out), (1, 0), "{report:?}");
    }
    for id in ids {
        let run = env.client.get(&id).await.unwrap();
        assert_eq!((run.state, run.attempt), (RunState::Completed, 1), "{id}");
    }
}
