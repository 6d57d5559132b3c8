//! WAL checkpoints: a truncating checkpoint empties the -wal file; a reader holding an old
//! snapshot keeps it from being checkpointed, and that is reported.

use rusqlite::Connection;
use serde_json::json;
use toolq::EnqueueRequest;
use toolq::store::CheckpointMode;

use crate::support::TestEnv;

async fn write_some(env: &TestEnv, n: usize) {
    let reqs = (0..n)
        .map(|i| {
            EnqueueRequest::new(
                "echo",
                json!({"message": format!("{i}{}", "x".repeat(200))}),
            )
        })
        .collect();
    env.client.enqueue_batch(reqs).await.unwrap();
}

#[tokio::test]
async fn truncate_checkpoint_shrinks_the_wal_unless_a_reader_pins_it() {
    let env = TestEnv::new();
    let store = env.client.store().clone();
    write_some(&env, 500).await;
    let grown = store.wal_bytes();
    assert!(grown > 0, "writes went to the WAL");

    let cp = store.checkpoint(CheckpointMode::Truncate).unwrap();
    assert!(!cp.busy, "{cp:?}");
    assert_eq!(store.wal_bytes(), 0, "truncate resets the -wal file");

    // A reader that holds a snapshot (an open sqlite3 shell in a transaction).
    let reader = Connection::open(env.db_path()).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    write_some(&env, 500).await;
    let pinned = store.wal_bytes();
    assert!(pinned > 0);
    let cp = store.checkpoint(CheckpointMode::Truncate).unwrap();
    assert!(cp.busy, "the reader is in the way: {cp:?}");
    assert_eq!(store.wal_bytes(), pinned, "nothing was reset");
    let health = store.wal_health(1).unwrap();
    assert!(health.checkpoint.backlog() > 0, "{health:?}");
    let warning = health.warning.expect("a pinned WAL is reported");
    assert!(warning.contains("long-lived reader"), "{warning}");

    // Once the reader lets go, the WAL is checkpointed and truncated.
    reader.execute_batch("COMMIT").unwrap();
    let cp = store.checkpoint(CheckpointMode::Truncate).unwrap();
    assert!(!cp.busy, "{cp:?}");
    assert_eq!(store.wal_bytes(), 0);
    assert!(store.wal_health(1).unwrap().warning.is_none());
}
