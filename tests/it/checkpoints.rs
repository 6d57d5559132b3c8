//! Background checkpoints: commits do not copy WAL pages into the database file themselves;
//! a store thread does, and the WAL still starts over so the file stays bounded.

use std::time::{Duration, Instant};

use toolq::store::sqlite::Store;

const PAGE: u64 = 4096;

/// One transaction writing about `pages` pages of blob rows.
fn write_pages(store: &Store, tag: usize, pages: usize) {
    store
        .write(|tx| {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO blob_rows (session_id, path, content, size, created_at, updated_at) \
                     VALUES ('s', ?1, zeroblob(4000), 4000, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')",
                )
                .unwrap();
            for i in 0..pages {
                stmt.execute([format!("/t/{tag}/{i}")]).unwrap();
            }
            Ok(())
        })
        .unwrap();
}

fn len(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

#[test]
fn a_store_thread_copies_the_wal_into_the_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = Store::open(&db).unwrap();
    let before = len(&db);
    // 1,600 pages: past the thread's wake-up mark (1,024), below the writer's own checkpoint
    // size (4,000; SQLite's automatic checkpoint is replaced by it). Only the thread copies.
    for tag in 0..16 {
        write_pages(&store, tag, 100);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    // The wake-up comes at 1,024 WAL frames, and some frames rewrite the same interior pages,
    // so one pass grows the file by somewhat fewer distinct pages (967 when it runs at once).
    while len(&db) < before + 800 * PAGE {
        assert!(
            Instant::now() < deadline,
            "no checkpoint: database file {} bytes, was {before}",
            len(&db)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn under_sustained_writes_the_wal_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = Store::open(&db).unwrap();
    let wal = dir.path().join("t.db-wal");
    let mut largest = 0;
    // 12,000 pages in commits of 40 (a worker's finish-and-claim transaction is about that).
    for tag in 0..300 {
        write_pages(&store, tag, 40);
        largest = largest.max(len(&wal));
    }
    assert!(
        len(&db) > 10_000 * PAGE,
        "the data reached the database file"
    );
    // The writer checkpoints itself at 4,000 WAL pages; allow for commits that found the
    // thread mid-checkpoint.
    assert!(largest < 6_000 * (PAGE + 24), "WAL grew to {largest} bytes");
}
