//! What answers when no page does: an unknown path (404) or a method a route does not
//! answer (405), in the request's format.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::error::Error;
use crate::web::AppState;
use crate::web::layout;

/// Any other path: `page PATH not found`, in the request's format.
pub async fn not_found(State(st): State<Arc<AppState>>, headers: HeaderMap, uri: Uri) -> Response {
    let e = Error::NotFound {
        what: "page",
        id: uri.path().to_string(),
    };
    let mut r = layout::error(&st, &headers, &e);
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.into_response()
}

/// A route asked with a method it does not answer (a GET on an action, a POST on a page):
/// 405 in the request's format; the router adds the `Allow` header.
pub async fn method_not_allowed(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    method: Method,
    uri: Uri,
) -> Response {
    let path = uri.path();
    let text = if method == Method::GET || method == Method::HEAD {
        format!("{path} is an action: it answers POST only (a form with the page's csrf field)")
    } else if method == Method::POST {
        format!("{path} is a page: it answers GET only")
    } else {
        format!("{path} does not answer {method}: only the methods in the Allow header")
    };
    layout::refusal(Some(&st), &headers, StatusCode::METHOD_NOT_ALLOWED, &text)
}
