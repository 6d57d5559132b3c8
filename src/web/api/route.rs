//! One declared route: its method and path, what it takes and answers (as JSON Schemas), and
//! its handler. The router and the OpenAPI document are both built from the same table, so
//! the document cannot drift from what the server answers.

use std::sync::Arc;

use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, MethodRouter, on};
use schemars::{JsonSchema, Schema, SchemaGenerator};

use crate::web::AppState;

/// Builds the schema of one type, registering it under `components/schemas`.
pub(crate) type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T` (a `$ref` to its component when it has a name).
pub(crate) fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// What a route answers on success.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    /// A JSON body with this status.
    Json(u16, SchemaFn),
    /// Server-Sent Events; each event's `data` is JSON of this schema.
    Events(SchemaFn),
    /// Plain bytes (a log), with this description.
    Bytes(&'static str),
}

/// A path or query parameter.
#[derive(Clone, Copy)]
pub(crate) struct Param {
    pub name: &'static str,
    pub about: &'static str,
}

/// One route of the API.
pub(crate) struct Route {
    pub method: Method,
    /// The path under `/api/v1`, axum style (`/runs/{id}`); OpenAPI uses the same syntax.
    pub path: &'static str,
    /// The OpenAPI `operationId` (camelCase), stable across versions.
    pub id: &'static str,
    /// The group it belongs to (an OpenAPI tag).
    pub tag: &'static str,
    pub summary: &'static str,
    pub about: &'static str,
    pub path_params: Vec<Param>,
    /// The query string's fields (a struct read with `Query`), if any.
    pub query: Option<SchemaFn>,
    /// The JSON body, if any.
    pub body: Option<SchemaFn>,
    pub answer: Answer,
    /// Error statuses beside the ones every route may answer (400, 401, 500).
    pub errors: Vec<u16>,
    pub handler: MethodRouter<Arc<AppState>>,
}

impl Route {
    fn new<H, T>(
        method: Method,
        filter: MethodFilter,
        path: &'static str,
        id: &'static str,
        h: H,
    ) -> Self
    where
        H: Handler<T, Arc<AppState>>,
        T: 'static,
    {
        Self {
            method,
            path,
            id,
            tag: "",
            summary: "",
            about: "",
            path_params: Vec::new(),
            query: None,
            body: None,
            answer: Answer::Json(200, schema::<serde_json::Value>),
            errors: Vec::new(),
            handler: on(filter, h),
        }
    }

    /// A GET route (reads; the read token may call it).
    pub fn get<H, T>(path: &'static str, id: &'static str, h: H) -> Self
    where
        H: Handler<T, Arc<AppState>>,
        T: 'static,
    {
        Self::new(Method::GET, MethodFilter::GET, path, id, h)
    }

    /// A POST route (acts: needs the acting token, refused when read-only).
    pub fn post<H, T>(path: &'static str, id: &'static str, h: H) -> Self
    where
        H: Handler<T, Arc<AppState>>,
        T: 'static,
    {
        Self::new(Method::POST, MethodFilter::POST, path, id, h)
    }

    /// Its group, summary line and longer description.
    pub fn doc(mut self, tag: &'static str, summary: &'static str, about: &'static str) -> Self {
        self.tag = tag;
        self.summary = summary;
        self.about = about;
        self
    }

    /// A `{name}` segment of the path.
    pub fn param(mut self, name: &'static str, about: &'static str) -> Self {
        self.path_params.push(Param { name, about });
        self
    }

    /// The query string, read as `Q`.
    pub fn query<Q: JsonSchema>(mut self) -> Self {
        self.query = Some(schema::<Q>);
        self
    }

    /// The JSON body, read as `B`.
    pub fn body<B: JsonSchema>(mut self) -> Self {
        self.body = Some(schema::<B>);
        self
    }

    /// Answers 200 with a JSON `A`.
    pub fn ok<A: JsonSchema>(mut self) -> Self {
        self.answer = Answer::Json(200, schema::<A>);
        self
    }

    /// Answers `status` with a JSON `A` (201 for a created resource).
    pub fn answers<A: JsonSchema>(mut self, status: u16) -> Self {
        self.answer = Answer::Json(status, schema::<A>);
        self
    }

    /// Answers an event stream whose events carry JSON `E`.
    pub fn events<E: JsonSchema>(mut self) -> Self {
        self.answer = Answer::Events(schema::<E>);
        self
    }

    /// Answers plain bytes.
    pub fn bytes(mut self, about: &'static str) -> Self {
        self.answer = Answer::Bytes(about);
        self
    }

    /// Further error statuses it may answer (404, 409, 413, ...).
    pub fn errors(mut self, statuses: &[u16]) -> Self {
        self.errors.extend_from_slice(statuses);
        self
    }
}
