//! The page shell (navigation, stylesheet, script) and small view helpers. maud escapes
//! every value spliced in, so text from runs is shown as text.

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
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
                        @if st.read_only { " " span.badge.ro { "read-only" } }
                        " " span #live .live title="Refreshes every second" { "live" }
                    }
                }
                main { (main) }
            }
        }
    }
}

/// A state badge.
pub fn state(s: &str) -> Markup {
    html! { span class={ "state s-" (s) } { (s.replace('_', " ")) } }
}

/// An instant as UTC text, or a dash.
pub fn at(t: Option<DateTime<Utc>>) -> Markup {
    match t {
        Some(t) => {
            html! { time datetime=(t.to_rfc3339()) title=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M:%SZ")) } }
        }
        None => html! { span.dim { "—" } },
    }
}

/// How long ago `t` was, from `now` ("3s ago", "in 2m").
pub fn ago(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    let secs = (now - t).num_seconds();
    let (n, future) = if secs < 0 {
        (-secs, true)
    } else {
        (secs, false)
    };
    let span = match n {
        0..=59 => format!("{n}s"),
        60..=3599 => format!("{}m", n / 60),
        3600..=86399 => format!("{}h", n / 3600),
        _ => format!("{}d", n / 86400),
    };
    if future {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// JSON pretty-printed in a `pre`.
pub fn json_block(v: &serde_json::Value) -> Markup {
    let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    html! { pre.json { (text) } }
}

/// A POST form with the CSRF field and one button; nothing under `--read-only`.
pub fn action(st: &AppState, href: &str, label: &str, class: &str, extra: Markup) -> Markup {
    if st.read_only {
        return html! {};
    }
    html! {
        form.inline method="post" action=(href) {
            input type="hidden" name="csrf" value=(st.csrf);
            (extra)
            button type="submit" class=(class) { (label) }
        }
    }
}

/// Bytes as "12.3 MiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
