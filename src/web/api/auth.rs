//! The API's guard: the dashboard's rules, answered as problems.
//! - On loopback without a token, the Host must be a loopback name (no DNS rebinding).
//! - With a token configured, every request carries one (`Authorization: Bearer`, or the
//!   dashboard's cookie): the acting token may do anything, the read token only GET.
//! - A request that acts (any method but GET and HEAD) is refused under `--read-only`, and
//!   when a browser sends it from another origin (`Origin`, `Sec-Fetch-Site`): a page on
//!   another site cannot use a loopback API without a token.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, Problem};
use crate::web::AppState;
use crate::web::auth::{Role, loopback_host, presented_role, same_origin};

/// Runs the checks, then the handler; adds the headers every answer carries.
pub(crate) async fn guard(st: State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = super::problem::full_path(req.extensions(), req.uri());
    let mut resp = match check(&st, req.method(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(ApiError(p)) => p.at(&path).into_response(),
    };
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn check(st: &AppState, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if st.loopback && !st.needs_token() && !loopback_host(headers) {
        return Err(Problem::new(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected",
            "this server answers only loopback host names",
        )
        .into());
    }
    let role = if st.needs_token() {
        presented_role(st, headers).ok_or_else(|| {
            let why = if headers.contains_key(header::AUTHORIZATION) {
                "wrong token: send Authorization: Bearer TOKEN with web.token or web.read_token"
            } else {
                "this API needs a token: send Authorization: Bearer TOKEN (web.token, or \
                 web.read_token to read only)"
            };
            let mut p = Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", why);
            p.field = Some("Authorization".into());
            ApiError::from(p)
        })?
    } else {
        Role::Act
    };
    if *method == Method::GET || *method == Method::HEAD {
        return Ok(());
    }
    let forbidden = |why: String| Problem::new(StatusCode::FORBIDDEN, "forbidden", why);
    if st.read_only {
        return Err(forbidden(
            "this server is read-only (web.read_only): it takes no actions".into(),
        )
        .into());
    }
    if role == Role::Read {
        return Err(forbidden(
            "the read token can read but not act: use the acting token (web.token)".into(),
        )
        .into());
    }
    same_origin(headers).map_err(|why| ApiError::from(forbidden(why)))?;
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if site == "cross-site" || site == "same-site" {
        return Err(forbidden(format!(
            "cross-origin request refused: Sec-Fetch-Site is {site}"
        ))
        .into());
    }
    Ok(())
}
