//! The page shell (navigation, stylesheet, script) and how a page answers: the page or its
//! JSON, or an error in the request's format. maud escapes every value spliced in, so text
//! from runs is shown as text.

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};
use serde::Serialize;

use super::AppState;
use crate::error::Error;

/// Whether the client asked for JSON.
pub fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"))
}

/// The page's data as JSON, or the page rendered from it.
pub fn respond<T: Serialize>(
    headers: &HeaderMap,
    data: &T,
    html: impl FnOnce(&T) -> Markup,
) -> Response {
    if wants_json(headers) {
        Json(data).into_response()
    } else {
        html(data).into_response()
    }
}

/// A query string or form that could not be read (a field of the wrong type, a missing one),
/// answered like the page's other bad input: HTML, or JSON `{"error"}`, status 400.
pub fn unreadable(
    st: &AppState,
    headers: &HeaderMap,
    what: &str,
    e: impl std::fmt::Display,
) -> Response {
    let e = crate::error::InputError::about(what, e.to_string());
    error(st, headers, &Error::Input(e))
}

/// An error as a page (or JSON `{"error"}`), with the status its kind calls for.
pub fn error(st: &AppState, headers: &HeaderMap, e: &Error) -> Response {
    let status = match e {
        Error::NotFound { .. } => StatusCode::NOT_FOUND,
        Error::Input(_) | Error::Schedule(_) => StatusCode::BAD_REQUEST,
        Error::Conflict(_) => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    refusal(Some(st), headers, status, &e.to_string())
}

/// An answer that is not the page asked for (an error, a refused request) in the request's
/// format: JSON `{"error": text}` under `Accept: application/json`, else an HTML page. Without
/// `st` (a request that has not shown the token) the page has no navigation and does not name
/// the database.
pub fn refusal(
    st: Option<&AppState>,
    headers: &HeaderMap,
    status: StatusCode,
    text: &str,
) -> Response {
    if wants_json(headers) {
        return (status, Json(serde_json::json!({"error": text}))).into_response();
    }
    let card = html! { section.card { h1 { "Error" } p.error { (text) } p { a href="javascript:history.back()" { "Back" } } } };
    let body = match st {
        Some(st) => shell(st, "Error", "", card),
        None => html! {
            (DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { "Error · toolq" } }
                body { main { (card) } }
            }
        },
    };
    (status, body).into_response()
}

/// The page around `main`. `nav` names the current section.
pub fn shell(st: &AppState, title: &str, nav: &str, main: Markup) -> Markup {
    let links = [
        ("overview", "/", "Overview"),
        ("runs", "/runs", "Runs"),
        ("batches", "/batches", "Batches"),
        ("schedules", "/schedules", "Schedules"),
        ("approvals", "/approvals", "Approvals"),
        ("workers", "/workers", "Workers"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · toolq" }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "toolq" }
                    nav {
                        @for (key, href, label) in links {
                            a href=(href) class=@if key == nav { "on" } { (label) }
                        }
                    }
                    span.meta {
                        (st.client.engine().location())
                        @if !super::role::can_act(st) { " " span.badge.ro { "read-only" } }
                        " " span #live .live title="Refreshes every second" { "live" }
                    }
                }
                main { (main) }
            }
        }
    }
}
