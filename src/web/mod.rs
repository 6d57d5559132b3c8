//! `toolq web`: the dashboard. An axum server that reads and acts only through [`Client`]
//! (so it works on every engine the library supports), renders pages with maud (escaped by
//! default), and answers every page as JSON too (`Accept: application/json`). Pages refresh
//! their live parts by polling once a second; polling only reads.
//!
//! Security: loopback by default; any other address needs a token (header
//! `Authorization: Bearer`, or a cookie set from `?token=` once). Every POST carries this
//! process's CSRF secret and a matching Origin; `--read-only` hides and refuses actions.

mod actions;
pub mod api;
mod assets;
pub(crate) mod auth;
mod batch_view;
mod filter;
mod fires;
mod layout;
mod pages;
mod role;
mod runs_table;
mod view;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::error::{Error, InputError, Result};
use pages::{
    approvals, batch, batches, bulk, fallback, overview, run, runs, schedule, schedules, session,
    workers,
};

/// How `toolq web` (or `toolq worker --web`) serves the dashboard.
#[derive(Debug, Clone, Default)]
pub struct WebOptions {
    /// `HOST:PORT` to listen on (port 0 picks a free one).
    pub listen: String,
    /// The token every request must carry; required off loopback.
    pub token: Option<String>,
    /// A second token that may read (pages, the API's GETs) but not act.
    pub read_token: Option<String>,
    /// Hide every action and refuse every POST (403).
    pub read_only: bool,
}

/// What every handler shares.
pub(crate) struct AppState {
    pub client: Client,
    pub token: Option<String>,
    pub read_token: Option<String>,
    pub read_only: bool,
    /// This process's CSRF secret: every form carries it, every POST must echo it.
    pub csrf: String,
    /// Whether the listener is on loopback (then the Host header must be a loopback name,
    /// which stops DNS rebinding).
    pub loopback: bool,
    pub overview: overview::Cache,
    /// The HTTP API's shared state (its change feed, its OpenAPI document).
    pub api: api::ApiState,
}

impl AppState {
    /// Whether requests must carry a token (one of the two is configured).
    pub fn needs_token(&self) -> bool {
        self.token.is_some() || self.read_token.is_some()
    }
}

/// A bound dashboard; [`WebServer::serve`] answers requests until shutdown.
pub struct WebServer {
    listener: TcpListener,
    state: Arc<AppState>,
}

impl std::fmt::Debug for WebServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebServer")
            .field("listener", &self.listener)
            .finish()
    }
}

impl WebServer {
    /// Checks the options and binds. A non-loopback address without a token is an input
    /// error (exit 2): the dashboard can cancel and approve runs.
    pub async fn bind(client: Client, opts: WebOptions) -> Result<Self> {
        let addr: SocketAddr = opts.listen.parse().map_err(|e| {
            InputError::new(
                "--listen",
                &opts.listen,
                format!("is not an address like 127.0.0.1:8080 ({e})"),
            )
        })?;
        let token = opts.token.filter(|t| !t.is_empty());
        let read_token = opts.read_token.filter(|t| !t.is_empty());
        let loopback = addr.ip().is_loopback();
        if !loopback && token.is_none() && read_token.is_none() {
            return Err(InputError::new(
                "--listen",
                &opts.listen,
                "is not a loopback address: give --token (or web.token) so that only \
                 holders of the token can see and steer runs",
            )
            .into());
        }
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| Error::io(format!("listen for the dashboard on {addr}"), e))?;
        let state = Arc::new(AppState {
            client,
            token,
            read_token,
            read_only: opts.read_only,
            csrf: auth::secret(),
            loopback,
            overview: overview::Cache::default(),
            api: api::ApiState::default(),
        });
        Ok(Self { listener, state })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| Error::io("read the dashboard address", e))
    }

    /// Serves until `shutdown` fires.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<()> {
        overview::warm(&self.state);
        let state = self.state.clone();
        let app = router(self.state);
        axum::serve(self.listener, app)
            .with_graceful_shutdown(async move {
                shutdown.cancelled().await;
                // Ends the API's open streams, which would otherwise keep their
                // connections (and so the shutdown) waiting.
                state.api.closing.cancel();
            })
            .await
            .map_err(|e| Error::io("serve the dashboard", e))
    }
}

fn router(state: Arc<AppState>) -> Router {
    dashboard(state.clone()).nest("/api/v1", api::router(state))
}

/// The dashboard's pages and actions, behind its guard (the API has its own).
fn dashboard(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(overview::page))
        .route("/runs", get(runs::page))
        .route("/runs/bulk", post(bulk::post))
        .route("/runs/{id}", get(run::page))
        .route("/runs/{id}/{action}", post(actions::run))
        .route("/batches", get(batches::page))
        .route("/batches/{id}", get(batch::page))
        .route("/batches/{id}/{action}", post(actions::batch))
        .route("/schedules", get(schedules::page))
        .route(
            "/schedules/{id}",
            get(schedule::page).post(actions::schedule),
        )
        .route("/approvals", get(approvals::page))
        .route("/sessions/{id}", get(session::page))
        .route("/workers", get(workers::page))
        .route("/assets/{name}", get(assets::serve))
        .fallback(fallback::not_found)
        .method_not_allowed_fallback(fallback::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        .with_state(state)
}
