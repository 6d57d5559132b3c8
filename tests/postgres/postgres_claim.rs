//! The claim on Postgres against rows other transactions hold: a queued run that a cancel, an
//! approval or an operator's `SELECT ... FOR UPDATE` has locked is left queued, and the claim
//! takes the other runs without waiting for that transaction.

use std::sync::mpsc;
use std::time::Duration;

use crate::engine_contract::{claim, queued};
use crate::support::{TestEnv, pg};

/// Holds a row lock on `id` in an open transaction on its own connection until `release`
/// says so, then rolls back. Returns once the lock is held.
fn hold_row_lock(url: &str, id: &str) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (locked_tx, locked_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (url, id) = (url.to_string(), id.to_string());
    let holder = std::thread::spawn(move || {
        pg::with_client(&url, async move |c| {
            c.batch_execute("BEGIN").await?;
            c.query("SELECT 1 FROM runs WHERE id = $1 FOR UPDATE", &[&id])
                .await?;
            locked_tx.send(()).expect("the test waits for the lock");
            // Nothing else runs on this connection meanwhile.
            let _ = release_rx.recv_timeout(Duration::from_secs(60));
            c.batch_execute("ROLLBACK").await
        })
        .expect("hold a row lock");
    });
    locked_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the row lock is held");
    (release_tx, holder)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_leaves_a_row_another_transaction_holds_and_takes_the_others_at_once() {
    let env = TestEnv::new();
    let held = queued(&env, "s1").await;
    let second = queued(&env, "s1").await;
    let third = queued(&env, "s2").await;
    let (release, holder) = hold_row_lock(&env.db.url, held.as_str());
    let got = tokio::time::timeout(Duration::from_secs(10), claim(&env, "wk_a", 10))
        .await
        .expect("the claim does not wait for the transaction holding a queued run");
    let mut ids: Vec<_> = got.iter().map(|r| r.id.clone()).collect();
    ids.sort();
    let mut want = vec![second.clone(), third.clone()];
    want.sort();
    assert_eq!(ids, want, "the held run stays queued, the others are taken");
    release.send(()).unwrap();
    holder.join().unwrap();
    // Once the lock is gone the run is claimable as any other.
    let later = claim(&env, "wk_b", 10).await;
    assert_eq!(
        later.iter().map(|r| &r.id).collect::<Vec<_>>(),
        [&held],
        "{later:?}"
    );
}

/// The claim's session scan reads `runs_claimable_idx` alone, even mid-drain with statistics
/// taken while every run was queued. With a probe ordered by `session_id` alone the planner
/// took `runs_session_created_idx` for the scan's first probes, which holds every run: each
/// claim then read the ended runs at the head of the next session from the heap.
#[tokio::test(flavor = "multi_thread")]
async fn the_session_scan_reads_the_claimable_index_alone_mid_drain() {
    let env = TestEnv::new();
    let reqs = (0..2000)
        .map(|i| {
            toolq::EnqueueRequest::new(
                crate::engine_contract::TOOL,
                serde_json::json!({"message": "m"}),
            )
            .session(format!("s{:02}", i % 50))
        })
        .collect();
    env.client.enqueue_batch(reqs).await.unwrap();
    let plans = pg::with_client(&env.db.url, async |c| {
        c.batch_execute("ANALYZE runs").await?;
        // The first half of each session ended, as a drain leaves them (at the head of the
        // session in `runs_session_created_idx`).
        c.batch_execute(
            "UPDATE runs SET state = 'completed', created_at = '2000-01-01T00:00:00.000Z', \
             finished_at = '2000-01-01T00:00:00.000Z' \
             WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER \
               (PARTITION BY session_id ORDER BY id) AS k FROM runs) r WHERE k <= 20)",
        )
        .await?;
        // Both plans: the custom one EXPLAIN makes with the values, and the generic one
        // toolq's pool connections make once and keep (`plan_cache_mode`).
        let scan = toolq::store::postgres::CLAIM_SESSION_SCAN;
        let custom = c
            .query(&format!("EXPLAIN {scan}"), &[&"s07", &64i64])
            .await?;
        c.batch_execute(&format!(
            "SET plan_cache_mode = force_generic_plan; PREPARE scan(text, bigint) AS {scan}"
        ))
        .await?;
        let generic = c.query("EXPLAIN EXECUTE scan('s07', 64)", &[]).await?;
        let text = |rows: &[tokio_postgres::Row]| {
            rows.iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("\n")
        };
        Ok([
            format!("custom:\n{}", text(&custom)),
            format!("generic:\n{}", text(&generic)),
        ])
    })
    .expect("explain the session scan");
    for plan in &plans {
        assert!(plan.contains("runs_claimable_idx"), "{plan}");
        for other in ["runs_session_created_idx", "Seq Scan", "Sort"] {
            assert!(!plan.contains(other), "reads {other}:\n{plan}");
        }
    }
}
