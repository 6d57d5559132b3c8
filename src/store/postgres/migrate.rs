//! Schema versions on Postgres: the `schema_version` table holds the version; an empty
//! database gets every step of `migrations/postgres/`, an older one the steps it lacks, and a
//! newer one (or a database holding other tables) is refused before anything is written.

use tokio_postgres::error::SqlState;

use super::tls::{self, SslMode};
use crate::error::StoreError;
use crate::store::OpenMode;

/// The schema version this build writes and understands (Postgres numbers its own).
pub const SCHEMA_VERSION: i64 = 7;

/// Ordered steps: `STEPS[i]` creates version `i + 1` from version `i`.
const STEPS: &[&str] = &[
    include_str!("../../../migrations/postgres/001_schema.sql"),
    include_str!("../../../migrations/postgres/002_background_runs.sql"),
    include_str!("../../../migrations/postgres/003_durable_runs.sql"),
    include_str!("../../../migrations/postgres/004_composition.sql"),
    include_str!("../../../migrations/postgres/005_tags_traces.sql"),
    include_str!("../../../migrations/postgres/006_result_beside_run.sql"),
    include_str!("../../../migrations/postgres/007_run_order.sql"),
];

/// What the database holds before we touch it.
enum Found {
    Empty,
    Version(i64),
}

/// Connects once, checks what the database holds and creates or migrates the schema as
/// `mode` allows. `location` is the URL without its password.
pub(crate) async fn setup(
    config: &tokio_postgres::Config,
    connector: tls::Connector,
    ssl_mode: SslMode,
    location: &str,
    mode: OpenMode,
) -> Result<(), StoreError> {
    let (mut client, connection) = config
        .connect(connector)
        .await
        .map_err(|e| connect_error(location, ssl_mode, &e))?;
    let driver = tokio::spawn(connection);
    let done = apply(&mut client, location, mode).await;
    drop(client);
    let _ = driver.await;
    done
}

/// Says why a connection failed, in words an operator acts on; never the password.
pub(crate) fn connect_error(
    location: &str,
    ssl_mode: SslMode,
    e: &tokio_postgres::Error,
) -> StoreError {
    let tls_problem = tls::explain(e, ssl_mode);
    // No SQLSTATE and no TLS problem: refused, timed out, reset, unresolved (the network
    // or a server that is down); a server starting, stopping or full says so by its class.
    let transient = match e.code() {
        None => tls_problem.is_none(),
        Some(c) => ["08", "53", "57P"]
            .iter()
            .any(|class| c.code().starts_with(class)),
    };
    let reason = match e.code() {
        None if let Some(why) = tls_problem => why,
        Some(c) if *c == SqlState::INVALID_PASSWORD => {
            "password authentication failed (check the user and password)".to_string()
        }
        Some(c) if *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            let message = db_message(e);
            // pg_hba.conf's `cert` method: say which options give the certificate.
            let hint = if message.contains("client certificate") {
                " (give sslcert=FILE and sslkey=FILE in the URL, or PGSSLCERT and PGSSLKEY)"
            } else {
                ""
            };
            format!("the server refused the login: {message}{hint}")
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => {
            format!("{} (create it first: createdb)", db_message(e))
        }
        _ => error_chain(e),
    };
    StoreError::Connect {
        url: location.to_string(),
        reason,
        transient,
    }
}

/// The error and its causes, one after another; a missing password says where one is read.
fn error_chain(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    if text.contains("password missing") {
        text.push_str(
            " (none in the URL, PGPASSWORD or the password file: PGPASSFILE, else ~/.pgpass)",
        );
    }
    text
}

fn db_message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string())
}

async fn inspect(
    client: &tokio_postgres::Transaction<'_>,
    location: &str,
) -> Result<Found, StoreError> {
    let pg = |what: &str| {
        let what = what.to_string();
        move |e| StoreError::pg(what, e)
    };
    let has_version: bool = client
        .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])
        .await
        .map_err(pg("read the schema version"))?
        .get(0);
    if has_version {
        let v: Option<i64> = client
            .query_one("SELECT max(version) FROM schema_version", &[])
            .await
            .map_err(pg("read the schema version"))?
            .get(0);
        let v = v.unwrap_or(0);
        if v > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                path: location.to_string(),
                found: v,
                supported: SCHEMA_VERSION,
            });
        }
        return Ok(if v == 0 {
            Found::Empty
        } else {
            Found::Version(v)
        });
    }
    refuse_foreign(client, location).await?;
    Ok(Found::Empty)
}

/// Refuses a database with no toolq schema that holds tables of its own.
async fn refuse_foreign(
    client: &tokio_postgres::Transaction<'_>,
    location: &str,
) -> Result<(), StoreError> {
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema()",
            &[],
        )
        .await
        .map_err(|e| StoreError::pg("read the schema", e))?
        .get(0);
    if tables > 0 {
        return Err(StoreError::NotToolq {
            path: location.to_string(),
            reason: format!(
                "has {tables} tables but no toolq schema_version table; refusing to write to it \
                 (give toolq a database of its own)"
            ),
        });
    }
    Ok(())
}

async fn apply(
    client: &mut tokio_postgres::Client,
    location: &str,
    mode: OpenMode,
) -> Result<(), StoreError> {
    let found = inspect_snapshot(client, location).await?;
    let from = match found {
        Found::Version(v) if v == SCHEMA_VERSION => return Ok(()),
        Found::Version(v) => v,
        Found::Empty if mode != OpenMode::Create => {
            return Err(StoreError::Missing {
                path: format!("{location} (no toolq schema in it)"),
            });
        }
        Found::Empty => 0,
    };
    if mode == OpenMode::Read {
        return Err(StoreError::ReadOnly {
            path: location.to_string(),
            action: format!("migrate schema version {from} to {SCHEMA_VERSION} (run toolq init)"),
        });
    }
    migrate_from(client, location, from).await
}

/// [`inspect`] in one snapshot for every read of it: another process may commit a new
/// schema between two of them.
async fn inspect_snapshot(
    client: &mut tokio_postgres::Client,
    location: &str,
) -> Result<Found, StoreError> {
    let snapshot = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(|e| StoreError::pg("begin reading the schema", e))?;
    let found = inspect(&snapshot, location).await;
    snapshot
        .commit()
        .await
        .map_err(|e| StoreError::pg("end reading the schema", e))?;
    found
}

/// Applies the steps after version `from` in one transaction, under the migration lock,
/// unless another process got there first.
async fn migrate_from(
    client: &mut tokio_postgres::Client,
    location: &str,
    from: i64,
) -> Result<(), StoreError> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| StoreError::pg("begin migration", e))?;
    // Another process may be setting up the same database: one at a time, then look again.
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&super::locks::MIGRATE],
    )
    .await
    .map_err(|e| StoreError::pg("lock for migration", e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL)",
    )
    .await
    .map_err(|e| StoreError::pg("create schema_version", e))?;
    let current: i64 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM schema_version", &[])
        .await
        .map_err(|e| StoreError::pg("read schema version", e))?
        .get(0);
    if current == SCHEMA_VERSION {
        return Ok(());
    }
    if current != from {
        return Err(StoreError::NotToolq {
            path: location.to_string(),
            reason: format!("schema version changed from {from} to {current} while opening"),
        });
    }
    apply_steps(&tx, from).await?;
    tx.commit()
        .await
        .map_err(|e| StoreError::pg("commit migration", e))
}

/// Runs the migration steps after version `from`, recording each version.
async fn apply_steps(tx: &tokio_postgres::Transaction<'_>, from: i64) -> Result<(), StoreError> {
    let now = crate::clock::ts(chrono::Utc::now());
    for (i, step) in STEPS.iter().enumerate().skip(from as usize) {
        let version = i as i64 + 1;
        tx.batch_execute(step)
            .await
            .map_err(|e| StoreError::pg(format!("migrate to version {version}"), e))?;
        tx.execute(
            "INSERT INTO schema_version (version, applied_at) VALUES ($1, $2)",
            &[&version, &now],
        )
        .await
        .map_err(|e| StoreError::pg("record schema version", e))?;
    }
    Ok(())
}
