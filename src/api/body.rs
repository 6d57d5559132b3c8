//! [`Body`]: a JSON request body, read whole up to [`MAX_BODY`] and parsed strictly. Every
//! refusal is a [`Problem`] that names what was wrong: the media type (415), the size (413),
//! the syntax or the field whose value has the wrong type or is unknown (400). Handlers see
//! the parsed value only, so a bad body writes nothing.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use super::Problem;

/// The largest body the API reads (4 MiB): room for a batch of ~20,000 runs.
pub(crate) const MAX_BODY: usize = 4 << 20;

/// A JSON body of type `T`. An empty body reads as `{}` (for actions whose fields are all
/// optional), which `T` refuses if it needs fields.
#[derive(Debug)]
pub(crate) struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Problem> {
        let path = super::problem::full_path(req.extensions(), req.uri());
        let too_large = || {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                format!("the body is over the API's limit of {MAX_BODY} bytes; send fewer runs per request"),
            )
            .at(&path)
        };
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_BODY as u64) {
            return Err(too_large());
        }
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
            .await
            .map_err(|_| too_large())?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return parse(b"{}", &path).map(Body);
        }
        let json = content_type.as_deref().is_some_and(|t| {
            let t = t.split(';').next().unwrap_or("").trim();
            t.eq_ignore_ascii_case("application/json") || t.to_ascii_lowercase().ends_with("+json")
        });
        if !json {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                format!(
                    "Content-Type {:?}: the body must be JSON (send Content-Type: application/json)",
                    content_type.unwrap_or_default()
                ),
            )
            .at(&path));
        }
        parse(&bytes, &path).map(Body)
    }
}

/// Parses `bytes` as `T`, naming the field of the first error (`runs[2].priority`).
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8], path: &str) -> Result<T, Problem> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.inner();
        let syntax = inner.is_syntax() || inner.is_eof();
        let mut p = Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-body",
            if syntax {
                format!("the body is not valid JSON: {inner}")
            } else if field == "." {
                format!("the body: {inner}")
            } else {
                format!("body field {field}: {inner}")
            },
        )
        .at(path);
        if !syntax && field != "." {
            p.field = Some(field);
        }
        p
    })
}

/// The query string read as `T` (its fields named in errors, unknown ones refused when `T`
/// says so). A missing query string reads as empty.
#[derive(Debug)]
pub(crate) struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Problem> {
        let query = parts.uri.query().unwrap_or("");
        let path = super::problem::full_path(&parts.extensions, &parts.uri);
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Params)
            .map_err(|e| {
                let field = e.path().to_string();
                let mut p = Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid-input",
                    if field == "." {
                        format!("the query string: {}", e.inner())
                    } else {
                        format!("query parameter {field}: {}", e.inner())
                    },
                )
                .at(&path);
                if field != "." {
                    p.field = Some(field);
                }
                p
            })
    }
}

/// The path's `{...}` segments, percent-decoded, as `T` (a `String`, or a tuple of them).
/// Ids are checked by the handler, which names their kind (`run id "sch_..": must start
/// with "bg_"`).
#[derive(Debug)]
pub(crate) struct Segments<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Segments<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Segments(v)),
            Err(e) => {
                let path = super::problem::full_path(&parts.extensions, &parts.uri);
                Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid-input",
                    format!("the path {path}: {}", e.body_text()),
                )
                .at(&path))
            }
        }
    }
}
