//! The stylesheet and script, embedded in the binary (no CDN, no network at run time).

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");

/// `GET /assets/{name}`.
pub async fn serve(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "app.css" => (CSS, "text/css; charset=utf-8"),
        "app.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}
