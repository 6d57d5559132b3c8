//! `/api/v1`: the HTTP JSON API, served beside the dashboard by `toolq web` and
//! `toolq worker --web`. Hosts in any language enqueue, wait, act and stream their inbox with
//! it; it reads and acts only through [`crate::Client`], so it works on every engine.
//!
//! The contract:
//! - resource names and JSON fields are the CLI's `--json` ones;
//! - errors are `application/problem+json` (RFC 9457) naming the field and value (`problem`);
//! - bodies are JSON, at most `body::MAX_BODY` (4 MiB) bytes, unknown fields refused (`body`);
//! - auth is the dashboard's: loopback needs no token, otherwise a bearer token; the read
//!   token may GET but not act (`auth`);
//! - every route is declared once in a `route::Route` table, from which both the router and
//!   the OpenAPI 3.1 document (`openapi`, checked in as `docs/openapi.json`) are built.

mod auth;
mod batches;
mod body;
mod feed;
mod inbox;
mod openapi;
mod problem;
mod route;
mod runs;
mod schedules;
mod tools;
mod wait;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::routing::MethodRouter;

use crate::web::AppState;
pub use openapi::document;
pub(crate) use problem::{ApiError, ApiResult, Problem};

/// The API's share of the server state.
#[derive(Default)]
pub(crate) struct ApiState {
    /// Wakes streams and waits when any process commits.
    pub feed: feed::Feed,
    /// The OpenAPI document, built on first request.
    doc: OnceLock<serde_json::Value>,
    /// Cancelled when the server starts shutting down: open streams end, so the graceful
    /// shutdown (which waits for every connection) does not wait for them forever.
    pub closing: tokio_util::sync::CancellationToken,
}

/// Every route of the API, in the order the document lists them.
pub(crate) fn routes() -> Vec<route::Route> {
    let mut all = Vec::new();
    all.extend(runs::routes());
    all.extend(tools::routes());
    all.extend(schedules::routes());
    all.extend(batches::routes());
    all.extend(inbox::routes());
    all.push(openapi::route());
    all
}

/// The `/api/v1` router (nested by the dashboard's), behind the API's own guard.
pub(crate) fn router(state: Arc<AppState>) -> Router<()> {
    let mut by_path: BTreeMap<&'static str, MethodRouter<Arc<AppState>>> = BTreeMap::new();
    for r in routes() {
        let merged = match by_path.remove(r.path) {
            Some(m) => m.merge(r.handler),
            None => r.handler,
        };
        by_path.insert(r.path, merged);
    }
    let mut app = Router::new();
    for (path, handler) in by_path {
        app = app.route(path, handler);
    }
    app.fallback(problem::not_found)
        .method_not_allowed_fallback(problem::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        .with_state(state)
}
