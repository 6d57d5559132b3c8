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
        let heads = toolq::store::postgres::CLAIM_SESSION_HEADS;
        let custom = c
            .query(&format!("EXPLAIN {scan}"), &[&"s07", &64i64])
            .await?;
        let tools = vec![crate::engine_contract::TOOL];
        let now = "2999-01-01T00:00:00.000Z";
        let custom_heads = c
            .query(
                &format!("EXPLAIN {heads}"),
                &[&"s07", &64i64, &tools, &now, &true],
            )
            .await?;
        c.batch_execute(&format!(
            "SET plan_cache_mode = force_generic_plan; PREPARE scan(text, bigint) AS {scan}; \
             PREPARE heads(text, bigint, text[], text, boolean) AS {heads}"
        ))
        .await?;
        let generic = c.query("EXPLAIN EXECUTE scan('s07', 64)", &[]).await?;
        let generic_heads = c
            .query(
                &format!(
                    "EXPLAIN EXECUTE heads('s07', 64, '{{{}}}', '{now}', true)",
                    crate::engine_contract::TOOL
                ),
                &[],
            )
            .await?;
        let text = |rows: &[tokio_postgres::Row]| {
            rows.iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("\n")
        };
        Ok([
            format!("custom:\n{}", text(&custom)),
            format!("generic:\n{}", text(&generic)),
            format!("custom, with heads:\n{}", text(&custom_heads)),
            format!("generic, with heads:\n{}", text(&generic_heads)),
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

/// The session scan with heads, whose probe of each session doubles as the head of its first
/// tool when that run is due, gives what a plain per-(session, tool) look-up gives: with a
/// session's first run not yet due, a session of a tool the worker does not run, a background
/// run left out, two tools, and the cursor anywhere (the scan wraps around).
#[tokio::test(flavor = "multi_thread")]
async fn the_session_scan_gives_each_sessions_best_due_run_per_tool() {
    let env = TestEnv::new();
    // (session, tool, priority, due in the past or the future, background)
    let fixture: &[(&str, &str, i64, bool, i64)] = &[
        ("s1", "a", 0, true, 0),
        ("s1", "a", 5, true, 0),
        ("s1", "b", 0, true, 0),
        // The first of s2 in index order is not due: its head is the next one.
        ("s2", "a", 9, false, 0),
        ("s2", "a", 1, true, 0),
        ("s2", "b", 3, false, 0),
        // s3 has only tool c, which one tool set below asks for, listed first.
        ("s3", "c", 0, true, 0),
        // s4's best run is a background run.
        ("s4", "a", 7, true, 1),
        ("s4", "a", 2, true, 0),
        ("s4", "b", 4, true, 1),
        ("s5", "b", 0, true, 0),
        ("s5", "b", 0, true, 0),
    ];
    let reqs = fixture
        .iter()
        .map(|(session, ..)| {
            toolq::EnqueueRequest::new(
                crate::engine_contract::TOOL,
                serde_json::json!({"message": "m"}),
            )
            .session(*session)
        })
        .collect();
    let ids = env.client.enqueue_batch(reqs).await.unwrap();
    let checked = pg::with_client(&env.db.url, async |c| {
        // The tools are renamed in place: the scan reads names, not the registry.
        for (id, (_, tool, priority, due, background)) in ids.iter().zip(fixture) {
            let run_at = if *due {
                "2000-01-01T00:00:00.000Z"
            } else {
                "2999-01-01T00:00:00.000Z"
            };
            c.execute(
                "UPDATE runs SET tool = $5, priority = $2, run_at = $3, background = $4 \
                 WHERE id = $1",
                &[&id.run_id.as_str(), priority, &run_at, background, tool],
            )
            .await?;
        }
        c.batch_execute("ANALYZE runs").await?;
        let scan = toolq::store::postgres::CLAIM_SESSION_HEADS;
        let reference = "SELECT s.session_id, h.id, h.tool, h.priority, h.run_at, h.background \
            FROM (SELECT DISTINCT session_id FROM runs WHERE state = 'queued') s \
            LEFT JOIN LATERAL (SELECT DISTINCT ON (r.tool) r.id, r.tool, r.priority, r.run_at, \
                r.background FROM runs r WHERE r.state = 'queued' AND r.session_id = s.session_id \
                AND r.tool = ANY($3::text[]) AND r.run_at <= $4 AND ($5::boolean OR r.background = 0) \
                ORDER BY r.tool, r.priority DESC, r.run_at, r.id) h ON true \
            WHERE $1::text IS NOT NULL AND $2::bigint > 0";
        let now = "2026-01-01T00:00:00.000Z";
        let rows = |rows: Vec<tokio_postgres::Row>| {
            let mut out: Vec<_> = rows
                .iter()
                .map(|r| {
                    (
                        r.get::<_, String>(0),
                        r.get::<_, Option<String>>(1),
                        r.get::<_, Option<String>>(2),
                        r.get::<_, Option<i64>>(3),
                        r.get::<_, Option<i64>>(5),
                    )
                })
                .collect();
            out.sort();
            out
        };
        let mut checked = Vec::new();
        for tools in [vec!["a"], vec!["b"], vec!["a", "b"], vec!["c", "a"]] {
            for background in [true, false] {
                for cursor in ["", "s2", "s5"] {
                    let args: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                        [&cursor, &64i64, &tools, &now, &background];
                    let got = rows(c.query(scan, &args).await?);
                    let want = rows(c.query(reference, &args).await?);
                    assert_eq!(got, want, "tools {tools:?}, background {background}, cursor {cursor:?}");
                    checked.push(got);
                }
            }
        }
        Ok(checked)
    })
    .expect("read the session heads");
    // The fixture's own expectations, so the reference is not checked against itself alone.
    let first = &checked[0];
    let head = |s: &str| {
        first
            .iter()
            .filter(|r| r.0 == s)
            .map(|r| r.3)
            .collect::<Vec<_>>()
    };
    assert_eq!(head("s1"), [Some(5)], "{first:?}");
    assert_eq!(
        head("s2"),
        [Some(1)],
        "the due run after one not yet due: {first:?}"
    );
    assert_eq!(
        head("s3"),
        [None],
        "a session of other tools gives no head: {first:?}"
    );
    assert_eq!(head("s4"), [Some(7)], "{first:?}");
    assert_eq!(head("s5"), [None], "{first:?}");
    let without_background = &checked[3];
    assert!(
        without_background
            .iter()
            .any(|r| r.0 == "s4" && r.3 == Some(2)),
        "background runs left out: {without_background:?}"
    );
}

/// A claim's future dropped at any point (a worker shutting down, a caller's timeout) leaves
/// no transaction open on a pooled connection. Its `BEGIN` goes out with its first reads, not
/// through tokio-postgres's `Transaction` (which rolls back when dropped): a connection it may
/// have begun on is closed rather than handed to the next operation inside the transaction,
/// whose statements would run in it and whose commit (or failure) would decide the dropped
/// claim's writes too.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_dropped_midway_leaves_no_transaction_open_in_the_pool() {
    use futures_util::FutureExt;
    let env = TestEnv::new();
    for i in 0..40 {
        queued(&env, &format!("s{}", i % 4)).await;
    }
    let open_transactions = || {
        pg::with_client(&env.db.url, async |c| {
            let row = c
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                     AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
                    &[],
                )
                .await?;
            Ok(row.get::<_, i64>(0))
        })
        .expect("read pg_stat_activity")
    };
    for polls in 1..40 {
        let mut cut = Box::pin(
            crate::engine_contract::engine(&env)
                .attempt_claim(crate::engine_contract::claim_of(&env, "wk_cut", 1)),
        );
        for _ in 0..polls {
            if (&mut cut).now_or_never().is_some() {
                break;
            }
            // The connection's task runs meanwhile, on another thread.
            std::thread::sleep(Duration::from_micros(100));
        }
        drop(cut);
        // A closed connection's backend ends a moment later. A pooled one in a transaction
        // stays until the server's `idle_in_transaction_session_timeout` (3 s) ends it.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while open_transactions() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the claim dropped after {polls} polls left its transaction open"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Every run the dropped claims did not commit is claimable, none twice.
    let rest = claim(&env, "wk_after", 100).await;
    let states = pg::with_client(&env.db.url, async |c| {
        let rows = c
            .query(
                "SELECT lease_owner, count(*) FROM runs WHERE state = 'running' GROUP BY 1",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
            .collect::<Vec<_>>())
    })
    .expect("read the runs");
    let total: i64 = states.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 40, "every run is running once: {states:?}");
    let after = states
        .iter()
        .find(|(w, _)| w == "wk_after")
        .map_or(0, |s| s.1);
    assert_eq!(after, rest.len() as i64, "{states:?}");
}
