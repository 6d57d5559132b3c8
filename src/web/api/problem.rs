//! Errors as `application/problem+json` (RFC 9457): a stable `type` per kind of problem, the
//! status, a `detail` that reads like the CLI's message, and for bad input the `field` and
//! `value` that were wrong, so a client can point at them.

use axum::extract::OriginalUri;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;

use crate::error::{Error, InputError, StoreError};

/// The media type of every error answer.
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Problem {
    /// What kind of problem: `urn:toolq:problem:` and a stable name (`invalid-input`,
    /// `invalid-body`, `unauthorized`, `forbidden`, `not-found`, `conflict`,
    /// `method-not-allowed`, `body-too-large`, `unsupported-media-type`, `internal`).
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong here, naming the field and value (the CLI's message).
    pub detail: String,
    /// The request path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The field, flag or body path that was wrong (bad input only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The value given for it (bad input only; shortened when long).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

impl Problem {
    /// A problem of kind `name` with `status` and `detail`.
    pub fn new(status: StatusCode, name: &str, detail: impl Into<String>) -> Self {
        Self {
            kind: format!("urn:toolq:problem:{name}"),
            title: status.canonical_reason().unwrap_or("Error").to_string(),
            status: status.as_u16(),
            detail: detail.into(),
            instance: None,
            field: None,
            value: None,
        }
    }

    /// 400 for bad input, naming its field and value.
    pub fn input(e: &InputError) -> Self {
        let mut p = Self::new(StatusCode::BAD_REQUEST, "invalid-input", e.to_string());
        p.field = Some(e.field.clone());
        p.value = e.shows_value.then(|| e.value.clone());
        p
    }

    /// The same problem, about the request at `path`.
    pub fn at(mut self, path: &str) -> Self {
        self.instance = Some(path.to_string());
        self
    }
}

impl From<&Error> for Problem {
    fn from(e: &Error) -> Self {
        match e {
            Error::Input(i) => Problem::input(i),
            Error::NotFound { .. } => {
                Problem::new(StatusCode::NOT_FOUND, "not-found", e.to_string())
            }
            Error::Conflict(_) => Problem::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            Error::Store(StoreError::Rejected {
                field,
                value,
                reason,
            }) => {
                let mut p = Problem::input(&InputError::new(field, value, reason));
                p.detail = e.to_string();
                p
            }
            Error::Store(StoreError::KeyConflict { .. }) => {
                Problem::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            Error::Store(StoreError::ReadOnly { .. }) => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                e.to_string(),
            ),
            // Other exit-2 errors (a bad schedule, an engine that cannot do this) are input.
            _ if e.exit_code() == 2 => {
                Problem::new(StatusCode::BAD_REQUEST, "invalid-input", e.to_string())
            }
            _ => Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut r = (status, body).into_response();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        r
    }
}

/// A handler's error: answered as a [`Problem`] (boxed: a `Result` stays small).
#[derive(Debug)]
pub(crate) struct ApiError(pub Box<Problem>);

/// What handlers return.
pub(crate) type ApiResult<T> = Result<T, ApiError>;

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        if matches!(Problem::from(&e).status, 500..) {
            tracing::error!(error = %e, "API request failed");
        }
        ApiError(Box::new(Problem::from(&e)))
    }
}

impl From<InputError> for ApiError {
    fn from(e: InputError) -> Self {
        ApiError(Box::new(Problem::input(&e)))
    }
}

impl From<Problem> for ApiError {
    fn from(p: Problem) -> Self {
        ApiError(Box::new(p))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

/// The request's whole path (`/api/v1/...`): a nested router sees only the rest.
pub(crate) fn full_path(parts: &axum::http::Extensions, uri: &Uri) -> String {
    parts
        .get::<OriginalUri>()
        .map_or_else(|| uri.path().to_string(), |o| o.0.path().to_string())
}

/// Any other path under `/api/v1`: 404.
pub(crate) async fn not_found(OriginalUri(uri): OriginalUri) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not-found",
        format!(
            "no API route {}: see /api/v1/openapi.json for the routes",
            uri.path()
        ),
    )
    .at(uri.path())
}

/// A route asked with a method it does not answer: 405 (the router adds `Allow`).
pub(crate) async fn method_not_allowed(method: Method, OriginalUri(uri): OriginalUri) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        format!(
            "{} does not answer {method}: only the methods in the Allow header",
            uri.path()
        ),
    )
    .at(uri.path())
}
