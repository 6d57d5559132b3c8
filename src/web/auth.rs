//! Every request passes [`guard`]: the Host check on loopback (no DNS rebinding), the token
//! when one is set, and, for POSTs, read-only refusal and the Origin check. The CSRF secret
//! itself is checked by each action's form ([`check_csrf`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::AppState;
use super::layout;
use super::role::ROLE;
pub use super::role::Role;

/// The cookie that carries the token after `?token=` was given once.
const COOKIE: &str = "toolq_token";

/// A fresh random secret (hex).
pub fn secret() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares in time independent of where the first difference is.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// A refusal in the request's format (JSON `{"error"}` or a page, like every other error).
/// `st` is given once the request has shown the token (then the page has the navigation).
fn refuse(st: Option<&AppState>, headers: &HeaderMap, status: StatusCode, why: &str) -> Response {
    layout::refusal(st, headers, status, why)
}

/// The request's token: `Authorization: Bearer T`, else the cookie.
fn presented(headers: &HeaderMap) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string());
    bearer.or_else(|| {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == COOKIE)
            .map(|(_, v)| v.to_string())
    })
}

/// Whether the request authenticated with the Authorization header (a script, which no
/// other site can make a browser send): such POSTs need no CSRF secret.
pub fn bearer(headers: &HeaderMap) -> bool {
    headers.contains_key(header::AUTHORIZATION)
}

fn host_is_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        // HTTP/1.0 without Host: nothing a browser sends.
        return true;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Where a `?token=` address redirects: the same page and its other query parameters, on
/// this server. A path starting `//` would be read by the browser as another host.
fn without_token(path: &str, query: Option<&str>) -> String {
    let mut to = format!("/{}", path.trim_start_matches(['/', '\\']));
    let rest: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty() && kv.split('=').next() != Some("token"))
        .collect();
    if !rest.is_empty() {
        to.push('?');
        to.push_str(&rest.join("&"));
    }
    to
}

/// The checks every request passes before its handler, and the headers every answer carries:
/// no other site may frame the dashboard (a framed page's Cancel button could be clicked
/// through a decoy, and its form would pass the CSRF check), guess content types, or learn
/// its addresses from the Referer.
pub async fn guard(st: State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let mut resp = check(st, req, next).await;
    let h = resp.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'; base-uri 'self'; form-action 'self'"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

async fn check(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    if st.loopback && !st.needs_token() && !host_is_loopback(headers) {
        return refuse(
            None,
            headers,
            StatusCode::MISDIRECTED_REQUEST,
            "this dashboard answers only loopback host names",
        );
    }
    let mut role = Role::Act;
    if st.needs_token() {
        match check_token(&st, &req) {
            Ok(r) => role = r,
            Err(r) => return *r,
        }
    }
    if req.method() == Method::POST
        && let Some(r) = check_post(&st, headers, role)
    {
        return r;
    }
    // Other methods reach the router, which answers 405 with the route's `Allow` header
    // (`pages::fallback::method_not_allowed`): no route has a handler for them.
    // The pages read the role to hide the actions the read token cannot take.
    ROLE.scope(role, next.run(req)).await
}

/// The role a presented token grants, if it is one of this server's tokens.
pub fn role_of(st: &AppState, given: &str) -> Option<Role> {
    if st.token.as_deref().is_some_and(|t| same(given, t)) {
        Some(Role::Act)
    } else if st.read_token.as_deref().is_some_and(|t| same(given, t)) {
        Some(Role::Read)
    } else {
        None
    }
}

/// The role of a request's `Authorization: Bearer` header or cookie, if it carries a token of
/// this server.
pub fn presented_role(st: &AppState, headers: &HeaderMap) -> Option<Role> {
    presented(headers).and_then(|given| role_of(st, &given))
}

/// Whether the Host header names a loopback address (the DNS-rebinding check).
pub fn loopback_host(headers: &HeaderMap) -> bool {
    host_is_loopback(headers)
}

/// Whether a request's Origin header, when present, is this server (the Host it was sent to).
pub fn same_origin(headers: &HeaderMap) -> Result<(), String> {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let ok = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|o| o == host);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "cross-origin request refused: Origin {origin} is not this server"
        ))
    }
}

/// The token check: the role the request's token grants, or what to answer instead of the
/// page (a refusal, or the redirect that trades `?token=` for the cookie).
fn check_token(st: &AppState, req: &Request) -> Result<Role, Box<Response>> {
    let headers = req.headers();
    let query_token = req.uri().query().and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "token")
            .map(|(_, v)| v.to_string())
    });
    if let Some(given) = query_token {
        if role_of(st, &given).is_none() {
            return Err(Box::new(refuse(
                None,
                headers,
                StatusCode::UNAUTHORIZED,
                "wrong token",
            )));
        }
        // Set the cookie once and drop the token from the address bar and history.
        let cookie = format!("{COOKIE}={given}; HttpOnly; SameSite=Strict; Path=/");
        let to = without_token(req.uri().path(), req.uri().query());
        return Err(Box::new(
            ([(header::SET_COOKIE, cookie)], Redirect::to(&to)).into_response(),
        ));
    }
    presented_role(st, headers).ok_or_else(|| {
        Box::new(refuse(
            None,
            headers,
            StatusCode::UNAUTHORIZED,
            "this dashboard needs its token: open it once with ?token=TOKEN, or send Authorization: Bearer TOKEN",
        ))
    })
}

/// The POST checks: the refusal under `--read-only` or the read token, or of an Origin other
/// than this host.
fn check_post(st: &AppState, headers: &HeaderMap, role: Role) -> Option<Response> {
    if st.read_only || role == Role::Read {
        let why = if st.read_only {
            "this dashboard is read-only: it takes no actions"
        } else {
            "the read token can see but not act: use the acting token (web.token)"
        };
        return Some(refuse(Some(st), headers, StatusCode::FORBIDDEN, why));
    }
    same_origin(headers)
        .err()
        .map(|why| refuse(Some(st), headers, StatusCode::FORBIDDEN, &why))
}

/// Checks a form's CSRF field (unless a script authenticated by header): the refusal, if
/// it fails.
pub fn check_csrf(st: &AppState, headers: &HeaderMap, given: &str) -> Option<Response> {
    if bearer(headers) || same(given, &st.csrf) {
        None
    } else {
        Some(refuse(
            Some(st),
            headers,
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale: reload the page and try again",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::without_token;

    #[test]
    fn the_token_redirect_stays_on_this_server_and_keeps_the_other_parameters() {
        assert_eq!(without_token("/runs", Some("token=t")), "/runs");
        assert_eq!(
            without_token("/runs", Some("state=failed&token=t&tool=x")),
            "/runs?state=failed&tool=x"
        );
        assert_eq!(without_token("//evil.com/", Some("token=t")), "/evil.com/");
        assert_eq!(without_token("/\\evil.com", Some("token=t")), "/evil.com");
        assert_eq!(without_token("/", None), "/");
    }
}
