//! [`Body`]: a JSON request body, read whole up to [`MAX_BODY`] and parsed strictly. Every
//! refusal is a [`Problem`] that names what was wrong: the media type (415), the size (413),
//! the syntax or the field whose value has the wrong type or is unknown (400). Handlers see
//! the parsed value only, so a bad body writes nothing.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use super::{ApiError, Problem};

/// The largest body the API reads (4 MiB): room for a batch of ~20,000 runs.
pub(crate) const MAX_BODY: usize = 4 << 20;

/// A body over [`MAX_BODY`] is still read (and dropped) up to this size before the 413, so
/// that a client which sends its whole body before it reads the answer (most do) gets the
/// 413 rather than a connection reset.
const DRAIN_MAX: usize = 64 << 20;

/// The longest pause between two pieces of a body.
const IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// The body's bytes, or `Err` once it passes [`MAX_BODY`] (the rest read and dropped, up to
/// [`DRAIN_MAX`]) or fails to arrive.
async fn read_up_to(body: axum::body::Body) -> Result<Vec<u8>, ()> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut seen = 0usize;
    // A client that stops sending mid-body is not waited for long.
    while let Some(chunk) = tokio::time::timeout(IDLE, stream.next())
        .await
        .map_err(|_| ())?
    {
        let chunk = chunk.map_err(|_| ())?;
        seen = seen.saturating_add(chunk.len());
        if seen > DRAIN_MAX {
            return Err(());
        }
        if seen <= MAX_BODY {
            bytes.extend_from_slice(&chunk);
        }
    }
    if seen > MAX_BODY { Err(()) } else { Ok(bytes) }
}

/// A JSON body of type `T`. An empty body reads as `{}` (for actions whose fields are all
/// optional), which `T` refuses if it needs fields.
#[derive(Debug)]
pub(crate) struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
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
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let expects_continue = req
            .headers()
            .get(header::EXPECT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
        if declared
            .is_some_and(|n| n > DRAIN_MAX as u64 || (n > MAX_BODY as u64 && expects_continue))
        {
            // Too big even to read away, or a client that waits for our go-ahead before it
            // sends (curl's Expect: 100-continue): answer now, unread.
            return Err(too_large().into());
        }
        let bytes = read_up_to(req.into_body())
            .await
            .map_err(|_| ApiError::from(too_large()))?;
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
            .at(&path)
            .into());
        }
        parse(&bytes, &path).map(Body)
    }
}

/// Parses `bytes` as `T`, naming the field of the first error (`runs[2].priority`).
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8], path: &str) -> Result<T, ApiError> {
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
        if !syntax {
            p.field = missing_field(&inner.to_string())
                .map(|name| {
                    if field == "." {
                        name.to_string()
                    } else {
                        format!("{field}.{name}")
                    }
                })
                .or((field != ".").then_some(field));
        }
        ApiError::from(p)
    })
}

/// The query string read as `T` (its fields named in errors, unknown ones refused when `T`
/// says so). A missing query string reads as empty.
#[derive(Debug)]
pub(crate) struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        parse_query(parts, query).map(Params)
    }
}

/// A query string read as [`Params`] does, except that `tag` may be repeated
/// (`?tag=customer=acme&tag=env=prod`): its values are taken out first (the decoder takes
/// each key once) and handed back beside the rest.
#[derive(Debug)]
pub(crate) struct TaggedParams<T>(pub T, pub Vec<String>);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for TaggedParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        let mut tags = Vec::new();
        let mut rest = form_urlencoded::Serializer::new(String::new());
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            if k == "tag" {
                tags.push(v.into_owned());
            } else {
                rest.append_pair(&k, &v);
            }
        }
        parse_query(parts, &rest.finish()).map(|t| TaggedParams(t, tags))
    }
}

/// Decodes a query string into `T`; an error names the parameter.
fn parse_query<T: DeserializeOwned>(parts: &Parts, query: &str) -> Result<T, ApiError> {
    let path = super::problem::full_path(&parts.extensions, &parts.uri);
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
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
        ApiError::from(p)
    })
}

/// The path's `{...}` segments, percent-decoded, as `T` (a `String`, or a tuple of them).
/// Ids are checked by the handler, which names their kind (`run id "sch_..": must start
/// with "bg_"`).
#[derive(Debug)]
pub(crate) struct Segments<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Segments<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Segments(v)),
            Err(e) => {
                let path = super::problem::full_path(&parts.extensions, &parts.uri);
                Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid-input",
                    format!("the path {path}: {}", e.body_text()),
                )
                .at(&path)
                .into())
            }
        }
    }
}

/// The field serde names in "missing field `tool`", which its path does not include (the
/// path ends at the object that lacks it).
fn missing_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")?
        .split_once('`')
        .map(|(name, _)| name)
}
