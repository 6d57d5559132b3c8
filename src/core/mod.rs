//! The core: what the worker, the scheduler, approvals, tools and the user-facing
//! [`crate::Client`] share. It holds the engine, the tool registry, the configuration, the
//! clock and this process's wake-ups, and it owns the operations more than one of them needs:
//! validating and inserting runs (`enqueue`), creating schedules (`schedules`), pruning
//! (`retention`), expiring approvals, and the one place that turns a decided end into what the
//! engine writes (`ends`). It also serves tools their narrow handle ([`crate::tool::ToolHost`]).
//!
//! Nothing here imports the client, the worker, the web or the CLI: they sit above it.

mod approvals;
pub mod batches;
pub mod ends;
pub mod enqueue;
pub mod events;
pub mod retention;
mod schedules;
mod tool_host;

pub use crate::run::request::{EnqueueRequest, Enqueued};
pub use batches::{BatchCreated, BatchEnqueued, BatchRequest, OnComplete};

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::approval::Rules;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::error::{Error, InputError, Result};
use crate::ids::RunId;
use crate::run::Run;
use crate::store::postgres::PgStore;
use crate::store::sqlite::Store;
use crate::store::{Engine, OpenMode};
use crate::tool::Registry;

struct Inner {
    /// The engine every operation goes through.
    engine: Arc<dyn Engine>,
    /// The same engine as SQLite (None on Postgres), for test support.
    store: Option<Store>,
    registry: Arc<Registry>,
    config: Config,
    clock: SharedClock,
    /// Wakes this process's workers when work is enqueued here.
    wake: Notify,
}

/// The engine, tools, configuration, clock and wake-ups of one process. Cheap to clone.
#[derive(Clone)]
pub struct Core {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("engine", &self.inner.engine)
            .finish()
    }
}

impl Core {
    /// Opens the database `config` names as `mode` allows. The engine follows the location: a
    /// `postgres://` URL (`database.url`, or a library caller's `db_path`) opens Postgres, a
    /// path the SQLite file.
    pub fn open(
        config: Config,
        registry: Registry,
        clock: SharedClock,
        mode: OpenMode,
    ) -> Result<Core> {
        let url = config.db_url.clone().or_else(|| {
            crate::db_url::is_postgres(&config.db_path).then(|| config.db_path.clone())
        });
        let (engine, store): (Arc<dyn Engine>, Option<Store>) = match &url {
            Some(url) => (Arc::new(PgStore::open(url, mode)?), None),
            None => {
                // Config::from_layers refuses these too; a library caller's Config is not
                // validated there.
                if let Some(reason) = crate::db_url::refuse_path(&config.db_path) {
                    let shown = format!("{:?}", crate::db_url::redact(&config.db_path));
                    return Err(InputError::new("db_path", shown, reason).into());
                }
                let store = Store::open_with(&config.db_path, mode)?;
                (Arc::new(store.clone()), Some(store))
            }
        };
        Ok(Core {
            inner: Arc::new(Inner {
                engine,
                store,
                registry: Arc::new(registry),
                config,
                clock,
                wake: Notify::new(),
            }),
        })
    }

    /// The engine: every store operation.
    pub fn engine(&self) -> &dyn Engine {
        &*self.inner.engine
    }

    /// The SQLite store under this core, if the engine is SQLite (test support).
    #[doc(hidden)]
    pub fn sqlite_store(&self) -> Option<&Store> {
        self.inner.store.as_ref()
    }

    /// Whether the engine is Postgres.
    pub fn is_postgres(&self) -> bool {
        self.inner.store.is_none()
    }

    /// The tools.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The clock.
    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    /// Now, from the clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.inner.clock.now()
    }

    /// Reads a run, or not found.
    pub async fn get_run(&self, id: &RunId) -> Result<Run> {
        self.engine()
            .run_get(id.clone())
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "run",
                id: id.to_string(),
            })
    }

    /// This process's approval rules (its tools' policies and `[approvals]`).
    pub fn approval_rules(&self) -> Rules<'_> {
        Rules {
            registry: self.registry(),
            config: self.config(),
        }
    }

    /// Wakes this process's workers (after work was enqueued or freed here).
    pub fn wake_workers(&self) {
        self.inner.wake.notify_one();
    }

    /// Resolves when [`Core::wake_workers`] is called (the claim loop's wake-up).
    pub fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.inner.wake.notified()
    }
}
