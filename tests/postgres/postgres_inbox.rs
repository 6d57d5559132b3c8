//! Inbox ids on a shared server: several hosts record ends at once (cancels: one short
//! transaction each, many in flight), and a reader that goes forward from the last id it saw
//! (as `inbox --follow` and hosts do) sees every message: an id never becomes visible after a
//! higher one was read.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;
use toolq::inbox::InboxFilter;
use toolq::{Client, Config, EnqueueRequest, RegistryBuilder};

use crate::support::TestEnv;

const RUNS: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_following_ids_sees_every_message_while_three_hosts_record_ends_at_once() {
    let env = TestEnv::new();
    let reqs = (0..RUNS)
        .map(|i| EnqueueRequest::new("echo", json!({"message": format!("m{i}")})).session("s"))
        .collect();
    let ids: Vec<_> = env
        .client
        .enqueue_batch(reqs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.run_id)
        .collect();
    // Three clients with pools of their own, as three hosts would have.
    let hosts: Vec<Client> = (0..3)
        .map(|_| {
            let mut config = Config::default();
            env.db.configure(&mut config);
            let registry = RegistryBuilder::new().with_builtins().build().unwrap();
            Client::open_with_clock(config, registry, Arc::new(env.clock.clone())).unwrap()
        })
        .collect();
    // Twelve writers, four per host, each cancelling its share of the runs.
    let writers: Vec<_> = (0..12)
        .map(|w| {
            let client = hosts[w % 3].clone();
            let mine: Vec<_> = ids.iter().skip(w).step_by(12).cloned().collect();
            tokio::spawn(async move {
                for id in mine {
                    client.cancel(&id).await.unwrap();
                }
            })
        })
        .collect();
    let (mut seen, mut after) = (BTreeSet::new(), 0);
    // Follow until every writer is done, then read what is left once more.
    let mut last_pass = false;
    loop {
        let done = writers.iter().all(|w| w.is_finished());
        let page = env
            .client
            .inbox(
                "s",
                InboxFilter {
                    after_id: after,
                    unacked_only: false,
                    limit: 1000,
                },
            )
            .await
            .unwrap();
        for m in page {
            assert!(m.id > after, "ids go forward");
            after = m.id;
            seen.insert(m.run_id.clone().unwrap());
        }
        if last_pass {
            break;
        }
        last_pass = done;
        tokio::task::yield_now().await;
    }
    for w in writers {
        w.await.unwrap();
    }
    let total = env
        .db
        .count("SELECT count(*) FROM inbox WHERE session_id = 's'");
    assert_eq!(total, RUNS as i64);
    assert_eq!(
        seen.len(),
        RUNS,
        "the reader missed messages that were recorded"
    );
}
