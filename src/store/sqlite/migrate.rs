//! Schema versions: a new file gets `schema.sql`; an older one is migrated step by step;
//! a newer one is refused before anything is written.

use rusqlite::Connection;

use crate::error::StoreError;

/// The whole schema, applied to a new database.
pub const SCHEMA_SQL: &str = include_str!("../../../schema.sql");

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 16;

/// Ordered migrations: `MIGRATIONS[i]` upgrades version `i + 1` to `i + 2`.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/002_finished_state_index.sql"),
    include_str!("../../../migrations/003_lean_hot_path.sql"),
    include_str!("../../../migrations/004_one_index_per_finish.sql"),
    include_str!("../../../migrations/005_tool_routing.sql"),
    include_str!("../../../migrations/006_run_stages_view.sql"),
    include_str!("../../../migrations/007_unique_runs.sql"),
    include_str!("../../../migrations/008_flow_control.sql"),
    include_str!("../../../migrations/009_lean_enqueue.sql"),
    include_str!("../../../migrations/010_lean_errors_stages.sql"),
    include_str!("../../../migrations/011_no_statement_journal.sql"),
    include_str!("../../../migrations/012_background_runs.sql"),
    include_str!("../../../migrations/013_durable_runs.sql"),
    include_str!("../../../migrations/014_composition.sql"),
    include_str!("../../../migrations/015_tags_traces.sql"),
    include_str!("../../../migrations/016_result_beside_run.sql"),
];

/// What the file holds before we touch it.
pub(crate) enum FileState {
    /// No toolq tables yet.
    Empty,
    /// A toolq database at this version.
    Version(i64),
}

/// Reads the version without writing, refusing newer files and foreign databases.
pub(crate) fn inspect(conn: &Connection, path: &str) -> Result<FileState, StoreError> {
    // One snapshot for both reads: another process may commit a new schema between them.
    let snapshot = conn
        .unchecked_transaction()
        .map_err(|e| StoreError::sqlite("begin reading the schema", e))?;
    let conn: &Connection = &snapshot;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| not_toolq_or(path, e, "read schema version"))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            path: path.to_string(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version > 0 {
        return Ok(FileState::Version(version));
    }
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| not_toolq_or(path, e, "read schema"))?;
    if tables > 0 {
        return Err(StoreError::NotToolq {
            path: path.to_string(),
            reason: format!(
                "has {tables} tables but no toolq schema version; refusing to write to it"
            ),
        });
    }
    Ok(FileState::Empty)
}

fn not_toolq_or(path: &str, e: rusqlite::Error, action: &str) -> StoreError {
    if let rusqlite::Error::SqliteFailure(f, _) = &e
        && f.code == rusqlite::ErrorCode::NotADatabase
    {
        return StoreError::NotToolq {
            path: path.to_string(),
            reason: "is not a SQLite database (or is encrypted or damaged)".into(),
        };
    }
    StoreError::sqlite(action, e)
}

/// Creates or upgrades the schema in one transaction.
pub(crate) fn apply(conn: &mut Connection, state: FileState) -> Result<(), StoreError> {
    let from = match state {
        FileState::Version(v) if v == SCHEMA_VERSION => return Ok(()),
        FileState::Version(v) => v,
        FileState::Empty => 0,
    };
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| StoreError::sqlite("begin migration", e))?;
    // Re-check under the write lock: another process may have created the schema meanwhile.
    let current: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| StoreError::sqlite("read schema version", e))?;
    if current == SCHEMA_VERSION {
        return Ok(());
    }
    if current != from {
        return Err(StoreError::NotToolq {
            path: String::new(),
            reason: format!("schema version changed from {from} to {current} while opening"),
        });
    }
    if from == 0 {
        tx.execute_batch(SCHEMA_SQL)
            .map_err(|e| StoreError::sqlite("create schema", e))?;
    } else {
        for (i, step) in MIGRATIONS.iter().enumerate().skip((from - 1) as usize) {
            tx.execute_batch(step)
                .map_err(|e| StoreError::sqlite(format!("migrate to version {}", i + 2), e))?;
            // A migration may edit table definitions in sqlite_master (versions 9 to 11 edit
            // CHECKs and foreign keys that way); a new schema cookie makes every connection,
            // this one included, parse them again instead of enforcing the definitions it had
            // loaded. After each step: a later ALTER TABLE (version 12 adds a column) edits
            // the definition at offsets taken from the parsed one, which must be the new text.
            let cookie: i64 = tx
                .query_row("PRAGMA schema_version", [], |r| r.get(0))
                .map_err(|e| StoreError::sqlite("read schema_version", e))?;
            tx.execute_batch(&format!("PRAGMA schema_version = {}", cookie + 1))
                .map_err(|e| StoreError::sqlite("bump schema_version", e))?;
        }
    }
    tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))
        .map_err(|e| StoreError::sqlite("set schema version", e))?;
    tx.commit()
        .map_err(|e| StoreError::sqlite("commit migration", e))
}
