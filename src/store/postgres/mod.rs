//! The Postgres engine: the same contract as the SQLite one ([`crate::store::Engine`]) on a
//! server that many worker hosts share. A deadpool of tokio-postgres connections; every write
//! operation is one transaction (retried on a serialization failure or deadlock), reads are
//! single statements or one read transaction. What SQLite gets from its single writer,
//! Postgres gets from row locks and transaction-scoped advisory locks (see `locks.rs`).

mod change_feed;
mod claim;
mod codec;
mod compose;
mod credentials;
mod engine;
mod errors;
mod finish;
mod flow;
mod gauges;
mod inbox;
mod journal;
mod locks;
pub(crate) mod migrate;
mod occurrences;
mod pipelined;
mod rescue;
mod retention;
mod runs;
mod schedules;
mod session;
mod sql;
pub(crate) mod tls;
mod workers;

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

pub use migrate::SCHEMA_VERSION;

/// The claim's session scan (`$1` the cursor, `$2` the most sessions), for the test of its
/// plan: which index it reads is not visible in its results. Not a stable API.
#[doc(hidden)]
pub const CLAIM_SESSION_SCAN: &str = claim::SESSIONS;

/// The claim's session scan with each session's heads (`$1` the cursor, `$2` the most
/// sessions, `$3` the tools, `$4` now, `$5` whether background runs may be taken), for the
/// test of its results and plan. Not a stable API.
#[doc(hidden)]
pub const CLAIM_SESSION_HEADS: &str = claim::SESSION_HEADS;

pub(crate) use errors::PgError;
use errors::{pool_error, retryable};
pub(crate) use sql::{P, exec, get, notify, query, query_one, query_opt};

use crate::error::StoreError;
use crate::store::{OpenMode, WriteStats};

/// Connections per process: the worker's finisher, claim loop and ticks, and readers.
const POOL_SIZE: usize = 8;
/// How long connecting may take before it counts as a failure.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A write that meets a serialization failure or deadlock is retried this many times.
const MAX_TX_RETRIES: u32 = 30;

struct Inner {
    /// The URL with its password hidden: the only form that is shown anywhere.
    location: String,
    config: tokio_postgres::Config,
    /// The TLS connector of every connection: the pool's, the schema setup's, the feed's.
    tls: tls::Connector,
    pool: Pool,
    retries: AtomicU64,
    transactions: AtomicU64,
    statement_ns: AtomicU64,
    commit_ns: AtomicU64,
}

/// A handle to one toolq database on a Postgres server. Cheap to clone.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("location", &self.inner.location)
            .finish()
    }
}

/// Runs `$body` in one transaction on a pooled connection, with `$tx` bound to it, and
/// commits; a serialization failure or deadlock rolls back and starts over.
macro_rules! write_tx {
    ($store:expr, |$tx:ident| $body:expr) => {{
        let store: &$crate::store::postgres::PgStore = $store;
        let mut tries = 0u32;
        loop {
            let mut conn = store.conn().await?;
            let t0 = std::time::Instant::now();
            let $tx = match conn.transaction().await {
                Ok(tx) => tx,
                // A pooled connection that died since it was handed out (a restarted server,
                // a runtime that owned it gone): nothing was sent; take another.
                Err(e) if e.is_closed() && tries < 3 => {
                    tries += 1;
                    continue;
                }
                Err(e) => return Err($crate::error::StoreError::pg("begin", e)),
            };
            let out: Result<_, $crate::error::StoreError> = async { $body }.await;
            let out = match out {
                Ok(v) => {
                    let t1 = std::time::Instant::now();
                    let done = $tx
                        .commit()
                        .await
                        .map(|()| v)
                        .map_err(|e| $crate::error::StoreError::pg("commit", e));
                    store.count_write(t0, t1);
                    done
                }
                // Not committed: a connection that broke under it (a stale pooled one) is
                // replaced and the transaction run again. A failed commit is never rerun
                // here: it may have committed; the caller's fences decide.
                Err(e) if store.lost_connection_retry(&e, &mut tries) => continue,
                Err(e) => Err(e),
            };
            match out {
                Err(e) if store.should_retry(&e, &mut tries).await => continue,
                other => break other,
            }
        }
    }};
}
pub(crate) use write_tx;

/// [`write_tx`] for a body that sends `BEGIN` itself, with its first statements
/// ([`pipelined::Pipelined::begin`], joined first): `$tx` is the [`pipelined::Pipelined`],
/// its statements go to `$tx.client()`. The same retries: a connection that broke under an
/// uncommitted transaction is replaced and the transaction run again (rolled back first, or
/// closed); a serialization failure or deadlock starts over; a failed commit is not rerun.
macro_rules! pipelined_tx {
    ($store:expr, |$tx:ident| $body:expr) => {{
        let store: &$crate::store::postgres::PgStore = $store;
        let mut tries = 0u32;
        loop {
            let $tx = $crate::store::postgres::pipelined::Pipelined::new(store.conn().await?);
            let t0 = std::time::Instant::now();
            let out: Result<_, $crate::error::StoreError> = async { $body }.await;
            let out = match out {
                Ok(v) => {
                    let t1 = std::time::Instant::now();
                    let done = $tx.commit().await.map(|()| v);
                    store.count_write(t0, t1);
                    done
                }
                Err(e) => {
                    $tx.rollback().await;
                    if store.lost_connection_retry(&e, &mut tries) {
                        continue;
                    }
                    Err(e)
                }
            };
            match out {
                Err(e) if store.should_retry(&e, &mut tries).await => continue,
                other => break other,
            }
        }
    }};
}
pub(crate) use pipelined_tx;

impl PgStore {
    /// Opens the toolq database at a `postgres://` URL as `mode` allows: creates the schema
    /// in an empty database under [`OpenMode::Create`] (and refuses to under the others),
    /// migrates an older one, and refuses a newer schema or a database holding other tables
    /// before anything is written. Blocking: it connects on a runtime of its own, so it can be
    /// called from sync and async code alike.
    pub fn open(url: &str, mode: OpenMode) -> Result<PgStore, StoreError> {
        let location = crate::db_url::redact(url);
        let bad_url = |reason: String| StoreError::BadUrl {
            url: location.clone(),
            reason,
        };
        let tls_url = tls::TlsUrl::parse(url).map_err(bad_url)?;
        let mut config = tokio_postgres::Config::from_str(&tls_url.driver_url)
            .map_err(|e| bad_url(PgError(e).to_string()))?;
        credentials::fill(&mut config, &tls_url.driver_url).map_err(bad_url)?;
        let connector = tls_url.connector().map_err(bad_url)?;
        config.connect_timeout(CONNECT_TIMEOUT);
        config.keepalives_idle(Duration::from_secs(15));
        if config.get_application_name().is_none() {
            config.application_name("toolq");
        }
        let mut setup = config.clone();
        session::bound(&mut setup, session::Bounds::IdleOnly);
        session::bound(&mut config, session::Bounds::All);
        let schema = (&setup, connector.clone(), tls_url.mode);
        set_up_schema(schema, &location, mode)?;
        let pool = build_pool(&config, &connector)?;
        Ok(PgStore {
            inner: Arc::new(Inner {
                location,
                config,
                tls: connector,
                pool,
                retries: AtomicU64::new(0),
                transactions: AtomicU64::new(0),
                statement_ns: AtomicU64::new(0),
                commit_ns: AtomicU64::new(0),
            }),
        })
    }

    /// The URL with its password hidden.
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    /// A pooled connection.
    pub(crate) async fn conn(&self) -> Result<deadpool_postgres::Object, StoreError> {
        // A closed connection (its server or its driver task gone) is dropped, not used.
        for _ in 0..POOL_SIZE {
            let conn = self.inner.pool.get().await.map_err(pool_error)?;
            if !conn.is_closed() {
                return Ok(conn);
            }
            drop(deadpool_postgres::Object::take(conn));
        }
        self.inner.pool.get().await.map_err(pool_error)
    }

    /// The connection settings (for the change feed's own connection).
    pub(crate) fn pg_config(&self) -> &tokio_postgres::Config {
        &self.inner.config
    }

    /// The TLS connector (for the change feed's own connection).
    pub(crate) fn tls(&self) -> tls::Connector {
        self.inner.tls.clone()
    }

    /// Whether to run a transaction again on a fresh connection after a storage fault
    /// before its commit (a connection that broke under it); counts the try.
    pub(crate) fn lost_connection_retry(&self, e: &StoreError, tries: &mut u32) -> bool {
        if e.fault() != crate::error::Fault::Storage || *tries >= 3 {
            return false;
        }
        *tries += 1;
        tracing::debug!(error = %e, "database connection lost mid-transaction; retrying");
        true
    }

    /// Whether to start a failed transaction over (after a short sleep); counts the retry.
    pub(crate) async fn should_retry(&self, e: &StoreError, tries: &mut u32) -> bool {
        if !retryable(e) || *tries >= MAX_TX_RETRIES {
            return false;
        }
        *tries += 1;
        self.inner.retries.fetch_add(1, Ordering::Relaxed);
        let ms = 1u64 << (*tries).min(7);
        tokio::time::sleep(Duration::from_millis(ms + rand::random::<u64>() % ms)).await;
        true
    }

    pub(crate) fn count_write(&self, t0: std::time::Instant, t1: std::time::Instant) {
        let i = &self.inner;
        i.statement_ns
            .fetch_add((t1 - t0).as_nanos() as u64, Ordering::Relaxed);
        i.commit_ns
            .fetch_add(t1.elapsed().as_nanos() as u64, Ordering::Relaxed);
        i.transactions.fetch_add(1, Ordering::Relaxed);
    }

    /// Transactions retried after a serialization failure or deadlock.
    pub fn busy_retries(&self) -> u64 {
        self.inner.retries.load(Ordering::Relaxed)
    }

    /// Time spent in write transactions so far.
    pub fn write_stats(&self) -> WriteStats {
        let i = &self.inner;
        WriteStats {
            transactions: i.transactions.load(Ordering::Relaxed),
            statement_secs: i.statement_ns.load(Ordering::Relaxed) as f64 / 1e9,
            commit_secs: i.commit_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// Runs `$body` in one read-only REPEATABLE READ transaction (one snapshot for every read in
/// it), with `$tx` bound to it.
macro_rules! read_tx {
    ($store:expr, |$tx:ident| $body:expr) => {{
        let store: &$crate::store::postgres::PgStore = $store;
        let mut conn = store.conn().await?;
        let $tx = conn
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| $crate::error::StoreError::pg("begin read", e))?;
        let out: Result<_, $crate::error::StoreError> = async { $body }.await;
        match out {
            Ok(v) => $tx
                .commit()
                .await
                .map(|()| v)
                .map_err(|e| $crate::error::StoreError::pg("end read", e)),
            Err(e) => Err(e),
        }
    }};
}
pub(crate) use read_tx;

/// Checks, creates or migrates the schema ([`migrate::setup`]) on a connection of its own,
/// on a runtime of its own, so opening can be called from sync and async code alike.
fn set_up_schema(
    (setup, tls, ssl_mode): (&tokio_postgres::Config, tls::Connector, tls::SslMode),
    location: &str,
    mode: OpenMode,
) -> Result<(), StoreError> {
    std::thread::scope(|s| {
        s.spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| StoreError::Task(format!("start a runtime to connect: {e}")))?;
            rt.block_on(migrate::setup(setup, tls, ssl_mode, location, mode))
        })
        .join()
        .map_err(|_| StoreError::Task("connecting to Postgres panicked".into()))?
    })
}

/// The pool of connections with `config` (opened on demand).
fn build_pool(config: &tokio_postgres::Config, tls: &tls::Connector) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        config.clone(),
        tls.clone(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .create_timeout(Some(CONNECT_TIMEOUT))
        .wait_timeout(Some(Duration::from_secs(60)))
        .build()
        .map_err(|e| StoreError::Task(format!("build the connection pool: {e}")))
}
